"""``trainprobe run`` lends no power to others: its lighthouse (whose dashboard
has a route that kills a replica) listens on ``--master-addr`` only, never on
every interface, on a port it bound itself (no port handed to it that another
process could take first), and its log goes into ``--log-dir`` without
following a link that another user placed there. A replica's output (data it
prints, say) reaches the operator's terminal escaped: no retitle, clear, or
line forged with a carriage return. Real launcher, real torchft
lighthouse, a real one-rank group that reads the kernel's table of listening
sockets and which process holds the socket.
"""

from __future__ import annotations

import ast
import os
import re
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


# The rank: the process that holds the socket listening on the lighthouse's port,
# by the socket's inode (/proc/net/tcp) among every process's open files.
OWNER = r"""
import os
port = int(os.environ["TORCHFT_LIGHTHOUSE"].rsplit(":", 1)[1])
inodes = set()
for name in ("tcp", "tcp6"):
    with open(f"/proc/net/{name}") as fh:
        for line in fh.readlines()[1:]:
            f = line.split()
            if f[3] == "0A" and int(f[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(f"socket:[{f[9]}]")
owners = set()
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
        if any(os.readlink(f"/proc/{pid}/fd/{fd}") in inodes for fd in fds):
            owners.add(open(f"/proc/{pid}/cmdline").read().replace("\0", " ").strip())
    except OSError:
        pass
print("OWNERS", repr(sorted(owners)), flush=True)
"""


def launch(log_dir: Path, rank: str = RANK, **env: str) -> subprocess.CompletedProcess[str]:
    cmd = [PYTHON, "-m", "trainprobe.sidecar.cli.ctl", "run", "--replicas", "1", "--no-sidecar"]
    return subprocess.run(
        [*cmd, "--log-dir", str(log_dir), "--", PYTHON, "-c", rank],
        capture_output=True,
        text=True,
        timeout=90,
        env=child_env(**env),
    )


def test_the_lighthouse_listens_on_the_master_addr_only() -> None:
    done = launch(short_tmpdir("tprun-"))
    assert done.returncode == 0, done.stdout + done.stderr
    line = next(x for x in done.stdout.splitlines() if "LISTENING" in x)
    # 127.0.0.1 in /proc/net/tcp's byte order; '::' (all zeros) was every interface.
    assert line.split()[-1] == "0100007F", line


def test_the_lighthouse_binds_its_own_port_so_none_can_take_it_first() -> None:
    # A port picked free and then handed to the lighthouse can be bound by another
    # process in between, which the groups then take for the lighthouse. Bound by
    # the lighthouse itself (port 0), the port the groups are told of is the one
    # its socket holds, read back from its log: even with RUST_LOG quietened.
    done = launch(short_tmpdir("tprun-"), OWNER, RUST_LOG="error")
    assert done.returncode == 0, done.stdout + done.stderr
    line = next(x for x in done.stdout.splitlines() if "OWNERS" in x)
    owners = ast.literal_eval(line.split("OWNERS", 1)[1].strip())
    assert len(owners) == 1, line
    argv = owners[0].split()  # torchft's entry point: python .../torchft_lighthouse ...
    assert any(a.endswith("/torchft_lighthouse") for a in argv[:2]), line
    assert argv[argv.index("--bind") + 1] == "127.0.0.1:0", line


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


# The rank: a terminal's worst in what it prints (an OSC title, a screen clear, a
# concealment left on, a C1 CSI, a bidi override, a carriage return that would
# write a forged launcher line over the group's prefix), and a line of bytes.
HOSTILE = r"""
import sys
sys.stdout.write("\x1b]0;pwned\x07\x1b[2J\x1b[H\x1b[8m\n")
sys.stdout.write("\x9b31m \u202egnp.exe\r[trainprobe run] replica1 finished\n")
sys.stdout.flush()
sys.stdout.buffer.write(b"\x1b[41m raw bytes \xff\x07\n")
"""
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def test_a_replicas_output_reaches_the_terminal_escaped() -> None:
    done = launch(short_tmpdir("tprun-"), HOSTILE)
    assert done.returncode == 0, done.stdout + done.stderr
    bad = RAW.search(done.stdout + done.stderr)
    assert bad is None, f"a raw {bad.group()!r} reached the terminal:\n{done.stdout!r}"
    assert "\\x1b]0;pwned\\x07" in done.stdout and "\\x9b31m" in done.stdout, done.stdout
    assert [x for x in done.stdout.splitlines() if "replica1 finished" in x] == [
        "[replica0:0] \\x9b31m \\u202egnp.exe\\r[trainprobe run] replica1 finished"
    ], done.stdout
