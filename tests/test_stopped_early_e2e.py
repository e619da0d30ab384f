"""A SIGSTOPped rank is confirmed by the early /proc read and killed before any
rule's clock runs out: real sidecar on shipped defaults, real gloo ranks.

Before, the episode opened when the 3 s stall floor fired on the waiting peer
(its last report then older than ``stale_after_s`` too), and its first
evidence round found state T: killed about 3.3 s after the stop. Now the
sidecar reads a verified local rank once it has been silent 1.2 report
intervals (core/hang/stopped.py); two T reads 0.25 s apart open the episode with a
``stopped`` incident, and its round kills at once. Asserted on what the
sidecar recorded (which rule opened the episode, how long the rank had been
silent then, the order of the records), not on a wall-clock bound.
"""

from __future__ import annotations

import json

from tests.support import Workers, short_tmpdir, sidecar, wait_for
from trainprobe.sidecar.core.hang.stopped import CONFIRM_GAP_S
from trainprobe.sidecar.core.judge.evidence import stale_after_s

#: A LivenessProbeHook()'s default interval (1 s), 20 ms steps; rank 1 stops itself.
ARGS = ["--steps", "2000", "--step-s", "0.02", "--interval-ms", "1000"]
ARGS += ["--hang-rank", "1", "--hang-at", "40", "--hang-how", "stop"]


def test_a_sigstopped_rank_is_confirmed_by_the_early_read_and_killed_before_stale() -> None:
    with (
        sidecar() as sc,
        Workers(2, sc.target, short_tmpdir(), job_id="early", args=ARGS) as w,
    ):
        wait_for(
            lambda: sc.incidents("action", job="early"),
            180,
            what="the kill",
        )
        lines = [json.loads(x) for x in sc.incident_log.read_text().splitlines() if x.strip()]
        mine = [r for r in lines if r.get("job_id") == "early"]
        # The episode was opened by the early read, not by the stall floor or a heartbeat.
        first = next(r for r in mine if r["type"] in ("incident", "incident_update"))
        assert first["type"] == "incident" and first["rule"] == "stopped", first
        assert first["verdict"] == "UNRESPONSIVE" and first["ranks"] == [1]
        ev = first["evidence"]["1"]
        assert ev["state"] == "T" and ev["read_gap_s"] >= CONFIRM_GAP_S, ev
        # Confirmed while its last report was younger than stale_after_s: before
        # the old path could even call the rank unresponsive.
        assert ev["report_age_s"] < stale_after_s(1000), ev
        # The same episode's round decided at once, on the kernel's word.
        i_dec = next(i for i, r in enumerate(mine) if r["type"] == "decision" and r.get("act"))
        dec = mine[i_dec]
        assert dec["rule"] == "stopped" and dec["definitive"] is True
        assert dec["incident_id"] == first["id"]
        assert first["diagnosis"]["culprits"] == [1] and first["targets"] == [1]
        # Nothing the clocks would have said came before the decision.
        assert not [r for r in mine[:i_dec] if r.get("rule") in ("stall", "heartbeat")]
        action = next(r for r in mine if r["type"] == "action")
        assert list(action["outcomes"]) == ["1"]
        assert action["outcomes"]["1"]["pid"] == w.pids[1]
        assert action["outcomes"]["1"]["signals"] == ["SIGKILL"]
        assert w.wait(60)[1] is not None
