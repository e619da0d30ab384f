"""The environment every test and every process it starts inherit.

torchft's Rust side (its lighthouse, each Manager) logs every quorum, heartbeat
and commit at info: in a failing test's captured output those lines buried the
test's own. The tests run it at warn, so its warnings and errors still show,
unless RUST_LOG is set (a person debugging torchft asks for more).
"""

from __future__ import annotations

import os

__all__: list[str] = []

# Here, before any test module imports torchft: its logger reads RUST_LOG as it starts.
os.environ.setdefault("RUST_LOG", "warn")
