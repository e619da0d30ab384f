"""deploy/k8s-job.yaml's pod trains again after trainprobe's kill (as root).

tests/test_pod_dirs.py's stand-in for the pod: each emptyDir a root-owned
0777 directory, every container as its manifest's UID and capabilities (one
exception: reach()), all in this test's PID namespace as the pod's are in
the pod's. Here the trainer container's own ``command`` runs too
(``torchrun`` as ``python -m torch.distributed.run``, from the repo root as
from the image's working directory), with its env, beside the sidecar
started from its own args on shipped defaults. Flags appended to the command
make the run short and make rank 1 SIGSTOP itself inside step 8 of the first
attempt, after the step-5 checkpoint: definitive evidence. The sidecar (UID
1000, only SYS_PTRACE) must kill it, torchrun (``--max-restarts``) must start
both ranks again from the checkpoint, and the job must finish. The trainer's
exec liveness probe is healthy once the job is back (its failing side, while
a doomed rank still runs, is in test_pod_dirs.py: a stopped rank dies within
milliseconds of the kill decision here, too briefly to catch).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.support import PYTHON, REPO, child_env, free_port, read_jsonl, short_tmpdir, wait_for
from tests.test_pod_dirs import PodStandIn, _run_as, as_uid, liveness_probe, manifest_sidecar
from tests.unit.test_deploy_manifest import JOB, _load
from trainprobe.sidecar.act.incident_log import read_incident_log

STEPS, CKPT_EVERY, HANG_AT = 20, 5, 8
RESUMED_FROM = HANG_AT // CKPT_EVERY * CKPT_EVERY

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root: real UIDs via setpriv"),
    pytest.mark.slow,  # about 25 s: a torchrun job of two attempts
]


def trainer_command(stand_in: PodStandIn, main: dict[str, Any], progress: Path) -> list[str]:
    """The manifest's trainer command on ``stand_in``, short, with the fault."""
    command = [stand_in.rewrite(main, a) for a in main["command"]]
    assert command[0] == "torchrun"
    extra = ["--steps", str(STEPS), "--ckpt-every", str(CKPT_EVERY), "--progress", str(progress)]
    extra += ["--hang-rank", "1", "--hang-at", str(HANG_AT), "--hang-how", "stop"]
    return [PYTHON, "-m", "torch.distributed.run", *command[1:], *extra]


def reach(uid: int, gid: int) -> tuple[str, ...]:
    """The capability ``uid`` needs to start this interpreter: none, unless it
    lives where that UID cannot search (a pyenv under a 0700 /root, say):
    setpriv execs it still holding root's capabilities, but torchrun starts
    its ranks from ``sys.executable`` as ``uid`` alone. CAP_DAC_READ_SEARCH
    opens files only: signals and ptrace, what this test is about, are as the
    manifest gives them."""
    found = subprocess.run([*as_uid(uid, gid=gid), "sh", "-c", f'test -x "{PYTHON}"'])
    return () if found.returncode == 0 else ("dac_read_search",)


def steps_of(events: list[dict[str, Any]], attempt: int) -> list[dict[str, Any]]:
    return [e for e in events if e["event"] == "step" and e["attempt"] == attempt]


@pytest.mark.timeout(240)
def test_the_job_manifests_trainer_is_killed_when_stopped_and_trains_again() -> None:
    pod = _load(JOB)["spec"]["template"]["spec"]
    (main,) = pod["containers"]
    stand_in = PodStandIn(pod, free_port())
    uid, gid, _ = _run_as(pod, main)
    work = short_tmpdir("tp-podrun-")
    os.chown(work, uid, gid)
    progress = work / "progress.jsonl"
    with manifest_sidecar(pod, stand_in) as log_path, open(work / "trainer.log", "wb") as log:
        proc = subprocess.Popen(
            [*as_uid(uid, *reach(uid, gid), gid=gid), *trainer_command(stand_in, main, progress)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=child_env(**stand_in.env(main, uid)),
            cwd=REPO,
        )
        probe = liveness_probe(stand_in, pod, main)
        try:
            wait_for(
                lambda: proc.poll() is not None or steps_of(read_jsonl(progress), 1),
                150,
                what="a restarted rank's step",
            )
            if proc.poll() is None:  # the trainer container is back: its probe says so
                assert subprocess.run(probe, timeout=10).returncode == 0
            proc.wait(120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
        output = (work / "trainer.log").read_text(errors="replace")
        assert proc.returncode == 0, output[-4000:]
        assert subprocess.run(probe, timeout=10).returncode == 0
        sidecar_log = log_path.read_text()
    incidents = read_incident_log(stand_in.dirs["trainprobe-state"] / "incidents.jsonl")
    events = read_jsonl(progress)
    (hang,) = [e for e in events if e["event"] == "hang"]
    assert (hang["rank"], hang["step"]) == (1, HANG_AT)
    # The sidecar, as UID 1000 with only SYS_PTRACE, verified the rank and killed it.
    assert f"(verified, uid {uid}" in sidecar_log
    (kill,) = [r for r in incidents if r.get("type") == "incident" and r["action"] == "kill"]
    assert kill["diagnosis"]["culprits"] == [1] and kill["targets"] == [1]
    (acted,) = [r for r in incidents if r.get("type") == "action" and "outcomes" in r]
    assert acted["outcomes"]["1"]["pid"] == hang["pid"] and acted["outcomes"]["1"]["exited"]
    # torchrun started both ranks again, from the last checkpoint before the hang.
    starts = {(e["attempt"], e["rank"]): e for e in events if e["event"] == "start"}
    last = max(a for a, _ in starts)
    assert last == 1 and {starts[(0, r)]["resumed_from"] for r in (0, 1)} == {0}
    assert {starts[(last, r)]["resumed_from"] for r in (0, 1)} == {RESUMED_FROM}
    assert hang["pid"] not in {starts[(last, r)]["pid"] for r in (0, 1)}
    done = sorted((e["rank"], e["attempt"], e["step"]) for e in events if e["event"] == "done")
    assert done == [(0, last, STEPS), (1, last, STEPS)]
    again = steps_of(events, last)
    first = {r: min(e["step"] for e in again if e["rank"] == r) for r in (0, 1)}
    assert first == {0: RESUMED_FROM + 1, 1: RESUMED_FROM + 1}
    stepping = max(min(e["t"] for e in again if e["rank"] == r) for r in (0, 1))
    print(f"\nonset -> every rank stepping again: {stepping - hang['t']:.1f} s")
