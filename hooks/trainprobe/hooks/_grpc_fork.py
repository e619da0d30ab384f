"""Import gRPC with its fork handlers off, unless the user chose otherwise.

gRPC's pthread_atfork handlers are skipped while another thread is inside
gRPC, which our reporter thread always is; children forked then (DataLoader
workers) crash in gRPC's post-fork code (grpc/grpc#29044; about one fork in
three in our test). The hook's channel is only ever used by its own thread in
the parent, so the handlers buy nothing. The variable is read when gRPC
initializes, so it is set only around the first import and then restored:
child processes see the user's environment unchanged.
"""

from __future__ import annotations

import os
import sys

_VAR = "GRPC_ENABLE_FORK_SUPPORT"


def import_grpc_without_fork_handlers() -> bool:
    """Import grpc with fork support off; False if it was imported already."""
    if "grpc" in sys.modules or _VAR in os.environ:
        return False
    os.environ[_VAR] = "0"
    try:
        import grpc  # noqa: F401
        from grpc import aio  # noqa: F401
    except ImportError:
        # A hook-less import (type checks, the pure parts) need not have gRPC;
        # creating a hook then fails with the real ImportError.
        return False
    finally:
        del os.environ[_VAR]
    return True


import_grpc_without_fork_handlers()
