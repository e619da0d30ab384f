"""Lightning under ``trainprobe run``: ReplicatedCallback beside LivenessProbeCallback
(tests/replicated_lightning_worker.py), 2 replica groups of one CPU rank, the real
sidecar with its shipped defaults.

A SIGSTOPped replica, or one that sleeps in its training_step (which only the
sidecar sees, and evicts): the survivor's fit goes on in the same process, the stopped
group is ended and restarted by the launcher, heals from the survivor, and both
fits end at the same committed step with equal parameters.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import PYTHON, REPO, SidecarProcess, short_tmpdir, wait_for
from tests.test_replicated_run import launched

pytest.importorskip("torchft")
pytest.importorskip("lightning")

WORKER = REPO / "tests" / "replicated_lightning_worker.py"
pytestmark = pytest.mark.timeout(240)


@pytest.mark.parametrize("fault", ["stop", "sleep"])
def test_a_stopped_lightning_replica_is_replaced_and_the_other_fit_goes_on(fault: str) -> None:
    work: Path = short_tmpdir("tplt-")
    with SidecarProcess(work) as sc:
        script = [PYTHON, str(WORKER), "--progress", str(work / "progress.jsonl")]
        script += ["--marker", str(work / "fault.done"), "--steps", "100000", "--stop-at", "10"]
        script += ["--stop-file", str(work / "stop.at"), "--fault", fault]
        with launched(work, sc.target, "--replicas", "2", script=script) as run:
            fault = wait_for(lambda: run.rows("fault"), 150, 0.1, "the fault")[0]
            survivor = run.rows("step", 0)[0]["pid"]
            wait_for(
                lambda: [r for r in run.rows("step", 0) if r["committed"] > fault["committed"]],
                60,
                0.1,
                "the survivor to commit past the fault",
            )
            wait_for(
                lambda: len([r for r in run.rows("step", 1) if r["pid"] != fault["pid"]]) >= 3,
                120,
                0.2,
                "the restarted replica to step",
            )
            last = max(r["committed"] for r in run.rows("step")) + 10
            (work / "stop.at").write_text(str(last))
            assert run.proc.wait(180) == 0, run.text()[-3000:]
        actions = [a for a in sc.incidents("action") if a.get("action") in ("evict", "kill")]
    done = {r["rank"]: r for r in run.rows("done")}
    assert done[0]["pid"] == survivor and done[1]["pid"] != fault["pid"]
    assert done[0]["committed"] == done[1]["committed"] == last
    assert done[0]["params"] == pytest.approx(done[1]["params"], abs=1e-6)
    pids = [o.get("pid") for a in actions for o in (a.get("outcomes") or {}).values()]
    assert pids == [fault["pid"]], actions  # the survivor was never signalled
    if fault == "sleep":  # only the sidecar sees a sleeping replica: it evicts it
        assert [(a["action"], a["evicted_replicas"]) for a in actions] == [
            ("evict", ["replica_1"])
        ], actions
