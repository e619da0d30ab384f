"""``trainprobe run`` with real parts: the launcher's own lighthouse (torchft's
binary), the real sidecar (shipped defaults), and examples/ddp_replicated.py
(examples/ddp_train.py's loop with ``replicate``) in 2 replica groups of one
gloo rank each.

A rank that sleeps or is SIGSTOPped in its step: the sidecar evicts its group,
the survivor commits again in the same process, the launcher restarts the
evicted group alone, and it trains on with the survivor's parameters. An 8 s
stall evicts nothing. Ctrl-C stops everything with status 130; a group that
keeps failing is restarted with growing delays, then given up with its status.
Timings are the bench's (bench/bench_replicated.py); here they are bounded
only by torchft's 30 s timeouts, which a recovery that did not work would reach.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import signal
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import (
    PYTHON,
    REPO,
    SidecarProcess,
    child_env,
    read_jsonl,
    short_tmpdir,
    wait_for,
)

pytest.importorskip("torchft")

SCRIPT = REPO / "examples" / "ddp_replicated.py"
pytestmark = pytest.mark.timeout(240)


class Run:
    """One ``trainprobe run`` of the replicated example, its output and progress."""

    def __init__(self, work: Path, sidecar_target: str, *flags: str, script: list[str]) -> None:
        self.work = work
        self.progress = work / "progress.jsonl"
        self.out = work / "launcher.log"
        cmd = [PYTHON, "-m", "trainprobe.sidecar.cli.ctl", "run", *flags, "--log-dir", str(work)]
        with open(self.out, "wb") as out:
            self.proc = subprocess.Popen(
                [*cmd, "--", *script],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=child_env(
                    TRAINPROBE_TARGET=sidecar_target,
                    TRAINPROBE_STATE_DIR=str(work / "state"),
                ),
            )

    def rows(self, event: str, rank: int | None = None) -> list[dict[str, Any]]:
        return [
            r
            for r in read_jsonl(self.progress)
            if r.get("event") == event and (rank is None or r.get("rank") == rank)
        ]

    def text(self) -> str:
        return self.out.read_text(errors="replace")

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(30)
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for r in read_jsonl(self.progress):  # leave nothing behind, even a stopped rank
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(r["pid"]), signal.SIGCONT)
                os.kill(int(r["pid"]), signal.SIGKILL)


@pytest.fixture
def work() -> Iterator[Path]:
    yield short_tmpdir("tprun-")


@pytest.fixture
def sidecar(work: Path) -> Iterator[SidecarProcess]:
    sc = SidecarProcess(work).start()
    yield sc
    sc.stop()


def example(progress: Path, steps: int, *fault: str) -> list[str]:
    return [PYTHON, str(SCRIPT), "--steps", str(steps), "--progress", str(progress), *fault]


@contextlib.contextmanager
def launched(work: Path, target: str, *flags: str, script: list[str]) -> Iterator[Run]:
    run = Run(work, target, *flags, script=script)
    try:
        yield run
    except BaseException:
        print(run.text()[-6000:])
        raise
    finally:
        run.close()


def destructive(sidecar: SidecarProcess) -> list[dict[str, Any]]:
    return [a for a in sidecar.incidents("action") if a.get("action") in ("evict", "kill")]


@pytest.mark.parametrize("how", ["sleep", "stop"])
def test_a_hung_replica_is_evicted_the_survivor_goes_on_and_the_group_rejoins(
    work: Path, sidecar: SidecarProcess, how: str
) -> None:
    fault = ("--hang-rank", "1", "--hang-at", "15", "--hang-how", how)
    # 260 steps: the survivor trains on until the evicted group has rejoined.
    script = example(work / "progress.jsonl", 260, *fault)
    with launched(work, sidecar.target, "--replicas", "2", script=script) as run:
        hang = wait_for(lambda: run.rows("hang"), 120, 0.1, "the hang")[0]
        survivor = run.rows("step", 0)[0]["pid"]
        resumed = wait_for(
            lambda: next((r for r in run.rows("step", 0) if r["step"] > hang["step"]), None),
            60,
            0.1,
            "the survivor to commit the hung step",
        )
        assert resumed["pid"] == survivor
        wait_for(
            lambda: len([r for r in run.rows("step", 1) if r["pid"] != hang["pid"]]) >= 5,
            90,
            0.2,
            "the evicted group, restarted, to step",
        )
        assert run.proc.wait(180) == 0, run.text()[-3000:]
    done = {r["rank"]: r for r in run.rows("done")}
    assert done[0]["pid"] == survivor and done[1]["pid"] != hang["pid"]
    assert done[0]["params"] == pytest.approx(done[1]["params"], abs=1e-6)
    # One action, on the hung rank alone: an eviction when the survivor waited for it
    # (a sleep; a SIGSTOP seen in the allreduce), or a kill of a stopped rank the
    # lighthouse had already dropped (its heartbeats stop too), found silent.
    actions = destructive(sidecar)
    assert len(actions) == 1, actions
    if actions[0]["action"] == "evict":
        assert actions[0]["evicted_replicas"] == ["replica_1"]
    else:
        assert how == "stop", actions
    pids = [o.get("pid") for o in (actions[0].get("outcomes") or {}).values()]
    assert pids == [hang["pid"]], actions  # the waiting replica was never signalled
    if how == "stop":  # SIGKILLed as it was: never resumed to commit the discarded step
        (out,) = actions[0]["outcomes"].values()
        assert out["signals"] == ["SIGKILL"] and out["signalled_first"] == "SIGKILL", out
    assert "replica1 exited (signal" in run.text()  # the eviction
    assert "replica1 started (pids" in run.text() and "restart 1)" in run.text()
    print(f"{how}: survivor committed again {resumed['t'] - hang['t']:.1f} s after onset")


def test_an_8s_stall_evicts_nothing_and_both_groups_end_alike(
    work: Path, sidecar: SidecarProcess
) -> None:
    fault = ("--hang-rank", "1", "--hang-at", "15", "--hang-how", "stall8")
    script = example(work / "progress.jsonl", 60, *fault)
    with launched(work, sidecar.target, "--replicas", "2", script=script) as run:
        assert run.proc.wait(180) == 0
    assert destructive(sidecar) == []
    starts = {r: {x["pid"] for x in run.rows("step", r)} for r in (0, 1)}
    assert all(len(pids) == 1 for pids in starts.values()), starts  # none restarted
    done = {r["rank"]: r for r in run.rows("done")}
    assert done[0]["params"] == pytest.approx(done[1]["params"], abs=1e-6)
    assert "[replica0:0]" in run.text() and "[replica1:0]" in run.text()  # prefixed logs


def test_groups_of_two_ranks_average_inside_and_across_groups(
    work: Path, sidecar: SidecarProcess
) -> None:
    # --nproc-per-replica 2: DDP inside each group, torchft across the groups.
    script = example(work / "progress.jsonl", 30)
    flags = ("--replicas", "2", "--nproc-per-replica", "2")
    with launched(work, sidecar.target, *flags, script=script) as run:
        assert run.proc.wait(180) == 0
    done = {r["rank"]: r for r in run.rows("done")}
    assert sorted(done) == [0, 1, 2, 3]  # job-wide ranks: group x 2 + rank in the group
    for rank in (1, 2, 3):
        assert done[rank]["params"] == pytest.approx(done[0]["params"], abs=1e-6)
    assert destructive(sidecar) == []
    assert "[replica1:1]" in run.text()


def test_ctrl_c_stops_every_group_the_lighthouse_and_its_own_sidecar(work: Path) -> None:
    # No sidecar serves at this target: the launcher starts one, and stops it too.
    target = f"unix://{work / 'own.sock'}"
    # A SIGSTOPped rank among them: it must be ended too.
    fault = ("--hang-rank", "1", "--hang-at", "5", "--hang-how", "stop")
    script = example(work / "progress.jsonl", 100000, *fault)
    with launched(work, target, "--replicas", "2", script=script) as run:
        wait_for(lambda: run.rows("hang"), 120, 0.1, "the stop")
        wait_for(lambda: run.rows("step", 0), 60, 0.1, "steps")
        run.proc.send_signal(signal.SIGINT)
        assert run.proc.wait(60) == 130
        assert "stopped by SIGINT" in run.text()
    pids = {int(r["pid"]) for r in read_jsonl(run.progress)}
    ps = subprocess.run(["ps", "-eo", "pid=,stat=,args="], capture_output=True, text=True).stdout
    alive = [ln for ln in ps.splitlines() if int(ln.split()[0]) in pids and " Z" not in ln]
    assert alive == []
    assert f"--listen {target}" not in ps  # its sidecar
    port = int(re.search(r"lighthouse http://127.0.0.1:(\d+)", run.text())[1])  # type: ignore[index]
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()


def test_a_group_that_keeps_failing_is_restarted_with_growing_delays(work: Path) -> None:
    starts = work / "starts"
    fail = f"import sys, time; open({str(starts)!r}, 'a').write(f'{{time.time()}}\\n'); sys.exit(3)"
    flags = ("--replicas", "1", "--no-sidecar", "--max-restarts", "3", "--backoff-s", "0.5")
    with launched(work, "unix:///nonexistent.sock", *flags, script=[PYTHON, "-c", fail]) as run:
        assert run.proc.wait(60) == 3
    t = [float(x) for x in starts.read_text().split()]
    gaps = [b - a for a, b in itertools.pairwise(t)]
    assert len(t) == 4, run.text()
    # The first failure restarts at once (an evicted group's way back waits for
    # nothing); each quick failure after it waits longer: 0.5 s, then 1 s.
    assert "restart 1/3 in 0.0 s" in run.text(), run.text()
    assert gaps[1] >= 0.5 and gaps[2] >= 1.0, gaps
    assert "restart 3/3 in 1.0 s" in run.text() and "given up" in run.text()
