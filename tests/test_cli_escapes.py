"""Every ``trainprobe`` command, its output and its error paths, with hostile strings.

A real sidecar is fed by raw-gRPC clients whose job ids and hosts carry a
terminal's worst (an OSC title change, a screen clear, a C1 CSI, a bidi
override, CR-LF and a forged line); an incident log is written with the same
in every field, and lies in a directory whose name carries them too. Each
command is run through the real ``main`` on both its output and its error
paths (several jobs and no ``--job``, a job the sidecar does not know, no
sidecar at all, an argument argparse refuses), and not one raw control
character may reach stdout or stderr. The commands are listed once here:
a command added later belongs in :data:`COMMANDS`.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.raw_client import connect, stepping
from tests.support import SidecarProcess, short_tmpdir, wait_for
from trainprobe.proto import PROTOCOL_VERSION, probe_pb2
from trainprobe.sidecar.cli import ctl

OSC = "\x1b]0;pwned\x07"
CLEAR = "\x1b[2J\x1b[H"
JOB_A = f"a{OSC}{CLEAR}"
JOB_B = "b\x9b31m\u202egnp.exe\r\nforged line"
HOST = f"h{CLEAR}\x07"
NAME = "[bold]name[/]"  # a name may carry no control character (validated), but markup
#: C0 but newline and tab, DEL, C1, and the invisible reordering characters.
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _client(target: str, job: str, rank: int, stop: threading.Event) -> None:
    hello = probe_pb2.Hello(
        protocol_version=PROTOCOL_VERSION,
        hook_version=f"v{OSC}",
        job_id=job,
        job_name=NAME,
        rank=rank,
        local_rank=rank,
        world_size=2,
        host=HOST,
        pid=os.getpid(),
        interval_ms=100,
    )
    now = time.monotonic_ns()
    phase = probe_pb2.Phase(name=f"p{OSC}", start_mono_ns=now)
    connect(target, stepping(hello, stop, active_phases=[phase]))


def hostile_log(path: Path) -> str:
    """An incident log with a hostile string in every field; returns an incident id."""
    inc = f"inc{OSC}"
    where = {"0": f"train.py:1 {CLEAR}"}
    records = [
        {
            "type": "incident", "id": inc, "time": time.time(), "job_id": JOB_A,
            "rule": f"stall{OSC}", "verdict": f"HUNG{CLEAR}", "ranks": [0, 1], "pids": [7, 8],
            "culprits": [0], "waiting": [1], "action": f"kill{OSC}",
            "action_reason": f"why{CLEAR}", "detection_latency_s": 1.0,
            "diagnosis": {"kind": f"k{OSC}", "text": f"t{CLEAR}", "where": where},
            "decision": {"act": False, "why": f"w{OSC}", "evidence": {
                "0": {"label": f"l{OSC}", "state": "S", "where": f"x{CLEAR}", "samples": 2}}},
        },
        {"type": "decision", "incident_id": inc, "act": True, "rule": f"r{OSC}",
         "decided_after_s": 2.0, "why": f"y{CLEAR}", "evidence": {}},
        {"type": "action", "incident_id": inc, "action": f"kill{OSC}", "outcomes": {
            f"0{OSC}": {"exited": True, "pid": 7, "signals": [f"SIG{CLEAR}"], "seconds": 1,
                        "error": f"e{OSC}"}}},
        {"type": "recovery", "incident_id": inc, "rank": f"0{OSC}", "new_pid": 9,
         "first_step": 3, "resumed_after_s": 4.0},
        {"type": "incident", "id": f"other{CLEAR}", "time": time.time(), "job_id": JOB_B,
         "rule": "stall", "verdict": "HUNG", "culprits": [], "action": "observe"},
    ]  # fmt: skip
    lines = [json.dumps(r) for r in records]
    lines += [f"not json {OSC}", json.dumps({"type": f"t{OSC}", "id": "x"})]
    path.write_text("\n".join(lines) + "\n")
    return inc


@pytest.fixture(scope="module")
def world() -> Iterator[tuple[SidecarProcess, Path, str]]:
    work = short_tmpdir()
    stop = threading.Event()
    with SidecarProcess(work, "--on-hung", "observe", "--settle-s", "0") as sc:
        threads = [
            threading.Thread(target=_client, args=(sc.target, job, rank, stop), daemon=True)
            for job in (JOB_A, JOB_B)
            for rank in (0, 1)
        ]
        for t in threads:
            t.start()
        wait_for(lambda: len(sc.status().workers) == 4, 30, what="four clients")
        logs = work / f"logs{OSC}{CLEAR}"
        logs.mkdir()
        inc = hostile_log(logs / "incidents.jsonl")
        try:
            yield sc, logs / "incidents.jsonl", inc
        finally:
            stop.set()
            for t in threads:
                t.join(10)


def run_ctl(argv: list[str]) -> tuple[int, str]:
    """``trainprobe argv`` through the real ``main``; its exit status, stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    saved = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = ctl.main(argv)
            except SystemExit as stop:  # argparse's refusals
                code = stop.code if isinstance(stop.code, int) else 2
    finally:
        if saved is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = saved
    return code, out.getvalue() + err.getvalue()


def test_no_command_writes_a_raw_control_character(
    world: tuple[SidecarProcess, Path, str], tmp_path: Path
) -> None:
    sc, log, inc = world
    t = ("--target", sc.target)
    nowhere = ("--target", f"unix://{tmp_path}/no{CLEAR}.sock")
    rep = ("--watch-s", "0", "--out", str(tmp_path / "rep"), "--log", str(log))
    commands: list[tuple[list[str], set[int]]] = [
        (["status", *t], {0}),
        (["status", "--wide", *t], {0}),
        (["status", "--json", *t], {0}),
        (["status", "--job", JOB_A, *t], {0}),
        (["status", "--job", f"gone{OSC}", *t], {1}),
        (["status", *nowhere], {1}),
        (["status", f"--bogus{CLEAR}"], {2}),
        (["diagnose", *t], {1}),  # several jobs: the sidecar's error lists their ids
        (["diagnose", "--job", JOB_A, *t], {0}),
        (["diagnose", "--json", "--job", JOB_B, *t], {0}),
        (["diagnose", "--ray", *t], {1}),
        (["diagnose", "--job", f"gone{OSC}", *t], {1}),
        (["top", "--once", *t], {0}),
        (["top", "--once", "--job", JOB_B, *t], {0}),
        (["top", "--once", "--job", f"gone{OSC}", *t], {1}),
        (["report", "--job", f"gone{OSC}", *t, *rep], {1}),  # no such job: one line
        (["report", *t, *rep], {1}),  # several jobs, no --job: the ids in the error line
        (["report", "--job", JOB_A, *t, *rep], {0}),
        (["report", "--job", JOB_A, *nowhere, *rep], {0}),
        (["incidents", "--log", str(log)], {0}),
        (["incidents", "--json", "--log", str(log)], {0}),
        (["incidents", inc, "--log", str(log)], {0}),
        (["incidents", inc, "--json", "--log", str(log)], {0}),
        (["incidents", "--job", JOB_A, "--log", str(log)], {0}),
        (["incidents", f"gone{OSC}", "--log", str(log)], {1}),
        (["incidents", "--since", f"2h{CLEAR}", "--log", str(log)], {2}),
        (["incidents", "--log", str(log.parent / "missing.jsonl")], {1}),
    ]
    seen = ""
    for argv, codes in commands:
        code, text = run_ctl(argv)
        assert code in codes, f"trainprobe {argv!r}: exit {code}:\n{text}"
        bad = RAW.search(text)
        assert bad is None, f"trainprobe {argv!r} wrote a raw {bad.group()!r}:\n{text!r}"
        assert "Traceback" not in text, text
        forged = [x for x in text.splitlines() if x.lstrip().startswith("forged line")]
        assert not forged, f"trainprobe {argv!r}: a job id began a line:\n{text}"
        seen += text
    # The hostile strings were there to escape: each path was really driven.
    assert "\\x1b]0;pwned\\x07" in seen and "\\x9b31m" in seen and "\\u202e" in seen
