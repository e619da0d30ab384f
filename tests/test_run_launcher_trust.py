"""``trainprobe run`` lends no power to others: its lighthouse (whose dashboard
has a route that kills a replica) listens on ``--master-addr`` only, never on
every interface, and its log goes into ``--log-dir`` without following a link
that another user placed there. Real launcher, real torchft lighthouse, a real
one-rank group that reads the kernel's table of listening sockets.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.support import PYTHON, child_env, short_tmpdir

pytest.importorskip("torchft")

# The rank: which local addresses listen on the lighthouse's port (/proc/net/tcp{,6}).
RANK = r"""
import os
port = int(os.environ["TORCHFT_LIGHTHOUSE"].rsplit(":", 1)[1])
found = []
for name in ("tcp", "tcp6"):
    with open(f"/proc/net/{name}") as fh:
        for line in fh.readlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            addr, _, hexport = local.partition(":")
            if state == "0A" and int(hexport, 16) == port:
                found.append(addr)
print("LISTENING", ",".join(found), flush=True)
"""


def launch(log_dir: Path) -> subprocess.CompletedProcess[str]:
    cmd = [PYTHON, "-m", "trainprobe.sidecar.cli.ctl", "run", "--replicas", "1", "--no-sidecar"]
    return subprocess.run(
        [*cmd, "--log-dir", str(log_dir), "--", PYTHON, "-c", RANK],
        capture_output=True,
        text=True,
        timeout=90,
        env=child_env(),
    )


def test_the_lighthouse_listens_on_the_master_addr_only() -> None:
    done = launch(short_tmpdir("tprun-"))
    assert done.returncode == 0, done.stdout + done.stderr
    line = next(x for x in done.stdout.splitlines() if "LISTENING" in x)
    # 127.0.0.1 in /proc/net/tcp's byte order; '::' (all zeros) was every interface.
    assert line.split()[-1] == "0100007F", line


def test_the_log_dir_is_not_a_way_to_overwrite_another_file() -> None:
    work = short_tmpdir("tprun-")
    victim = work / "victim.txt"
    victim.write_text("precious\n")
    logs = work / "logs"
    logs.mkdir()
    os.symlink(victim, logs / "lighthouse.log")  # placed by whoever can write the dir
    done = launch(logs)
    assert victim.read_text() == "precious\n"
    assert done.returncode == 1, done.stdout + done.stderr
    assert "lighthouse.log" in done.stderr and "symbolic link" in done.stderr, done.stderr
