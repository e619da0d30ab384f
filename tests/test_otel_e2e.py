"""End to end with telemetry: real gloo ranks hang, a real sidecar process kills
them, and a real OTLP receiver and Prometheus scrapes see it all; then the same
with the collector down.
"""

from __future__ import annotations

import time

import pytest

from tests.otel_support import OtlpReceiver, Span
from tests.support import Workers, free_port, short_tmpdir, sidecar, wait_for
from tests.test_otel_export import FAST_EXPORT, samples_of, scrape
from trainprobe.sidecar.otel import step_trace_id, trace_id_hex

pytestmark = pytest.mark.slow

HANG = ["--steps", "400", "--step-s", "0.02", "--hang-rank", "1", "--hang-at", "10"]
#: The hook times each DDP gradient bucket (issue 3): collective spans come from it.
WATCHED = [*HANG, "--watch-ddp"]


def test_hang_gives_an_incident_span_linked_to_the_unfinished_steps() -> None:
    port = free_port()
    with (
        OtlpReceiver() as rcv,
        sidecar(
            "--stall-timeout-s",
            "3",
            # sync_inflight's default went 5 -> 3 s (issue 12): keep it out of the way
            # of the stall incident whose span this test reads.
            "--sync-timeout-s",
            "5",
            "--otlp-endpoint",
            rcv.endpoint,
            "--trace-every-n-steps",
            "4",
            "--metrics-port",
            str(port),
            "--metrics-host",
            "127.0.0.1",
            "--hang-patience-s",
            "0",
            env=FAST_EXPORT,
        ) as sc,
        Workers(2, sc.target, short_tmpdir(), job_id="otel-hang", args=WATCHED) as w,
    ):
        inc = sc.wait_incident(lambda r: r["rule"] == "stall", timeout_s=60)
        wait_for(lambda: sc.incidents("action"), 30, what="action record")

        def named(prefix: str) -> list[Span]:
            return [s for s in rcv.spans() if s.name.startswith(prefix)]

        (incident,) = wait_for(lambda: named("incident HUNG stall"), 15, what="incident span")
        (action,) = wait_for(lambda: named("action kill"), 15, what="action span")
        spans = {s.span_id: s for s in rcv.spans()}

        a = incident.attributes
        assert a["trainprobe.incident.id"] == inc["id"]
        assert a["trainprobe.job_id"] == "otel-hang"
        assert (a["trainprobe.rule"], a["trainprobe.verdict"]) == ("stall", "HUNG")
        assert a["trainprobe.ranks"] == inc["ranks"] and 1 in inc["ranks"]
        assert a["trainprobe.evidence.1.step"] == 9
        assert a["trainprobe.evidence.1.step_age_s"] >= 3.0
        assert a["trainprobe.action"] == "kill"
        assert incident.trace_id == trace_id_hex(step_trace_id("otel-hang", 10))
        assert incident.status_code == 2  # ERROR
        assert incident.resource["service.name"] == "trainprobe-sidecar"
        # The span runs from the onset to the detection: its length is the latency.
        assert abs(incident.duration_ns / 1e9 - inc["detection_latency_s"]) < 0.01

        # Links: each stalled rank's unfinished step 10 and its last step 9.
        linked = {
            (link["attributes"]["trainprobe.rank"], link["attributes"]["trainprobe.link"]): spans[
                link["span_id"]
            ]
            for link in incident.links
        }
        for rank in inc["ranks"]:
            open_step = linked[(rank, "unfinished")]
            last = linked[(rank, "last")]
            assert open_step.attributes["trainprobe.step"] == 10
            assert open_step.attributes["trainprobe.step.complete"] is False
            assert open_step.attributes["process.pid"] == w.pids[rank]
            assert open_step.trace_id == incident.trace_id
            assert last.attributes["trainprobe.step"] == 9
            assert open_step.start_ns == last.end_ns
            # The stall started when step 9 ended: onset and that moment agree.
            assert abs(open_step.start_ns - incident.start_ns) < 50_000_000

        # Rank 1 hangs before its backward; rank 0 waits in the step-10 allreduce:
        # that collective is an open span under rank 0's unfinished step.
        inflight = linked[(0, "in flight")]
        assert inflight.name == "allreduce"
        assert inflight.parent_id == linked[(0, "unfinished")].span_id
        assert inflight.attributes["trainprobe.collective.complete"] is False
        assert inflight.duration_ns / 1e9 >= 2.5  # in flight since before the stall began
        assert (1, "in flight") not in linked

        # The kill is the incident's child and carries the outcome.
        assert (action.parent_id, action.trace_id) == (incident.span_id, incident.trace_id)
        assert action.attributes["trainprobe.action.ok"] is True
        for rank in inc["targets"]:
            assert action.attributes[f"trainprobe.outcome.{rank}.pid"] == w.pids[rank]
            assert action.attributes[f"trainprobe.outcome.{rank}.exited"] is True

        # Sampled steps: ranks side by side in one trace per step, with the workers' timing.
        step8 = [
            s for s in rcv.spans() if s.name == "step" and s.attributes["trainprobe.step"] == 8
        ]
        assert sorted(s.attributes["trainprobe.rank"] for s in step8) == [0, 1]
        assert {s.trace_id for s in step8} == {trace_id_hex(step_trace_id("otel-hang", 8))}
        progress = {(e["rank"], e["step"]): e["t"] for e in w.events("step")}
        every = {x.span_id: x for x in rcv.spans()}
        for s in step8:
            # The gradient allreduce the hook timed, inside its step.
            (bucket,) = [c for c in every.values() if c.parent_id == s.span_id]
            assert bucket.name == "allreduce" and bucket.trace_id == s.trace_id
            assert s.start_ns <= bucket.start_ns and bucket.end_ns <= s.end_ns
            assert bucket.attributes["trainprobe.rank"] == s.attributes["trainprobe.rank"]
            rank = s.attributes["trainprobe.rank"]
            worker_s = progress[(rank, 8)] - progress[(rank, 7)]
            assert abs(s.duration_ns / 1e9 - worker_s) < 0.02
            # The progress line is written right after on_step_end, on the same host.
            assert abs(s.end_ns / 1e9 - progress[(rank, 8)]) < 0.05

        # Metrics: the verdicts and the action, on the scrape and over OTLP.
        fams = wait_for(
            lambda: (f := scrape(port)) and samples_of(f, "trainprobe_actions") and f,
            10,
            what="action count on the scrape",
        )
        # (the text parser names counter families without their _total suffix)
        (verdicts,) = samples_of(
            fams, "trainprobe_verdicts", trainprobe_verdict="HUNG", trainprobe_rule="stall"
        )
        assert verdicts.value == len(inc["ranks"])
        (kills,) = samples_of(
            fams,
            "trainprobe_actions",
            trainprobe_action="kill",
            trainprobe_action_outcome="ok",
        )
        assert kills.value == 1

        def otlp_verdicts() -> float:
            return max(
                (
                    v
                    for n, _, at, v in rcv.points()
                    if n == "trainprobe.verdicts" and at["trainprobe.verdict"] == "HUNG"
                ),
                default=0,
            )

        wait_for(lambda: otlp_verdicts() == len(inc["ranks"]), 10, what="OTLP verdict count")
        w.wait(30)


def test_dead_collector_costs_one_log_line_and_no_kill_is_late() -> None:
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    env = {**FAST_EXPORT, "OTEL_EXPORTER_OTLP_TIMEOUT": "2"}
    with sidecar(
        "--stall-timeout-s", "3", "--otlp-endpoint", dead, "--hang-patience-s", "0", env=env
    ) as sc:
        # A healthy run completes...
        with Workers(
            2,
            sc.target,
            short_tmpdir(),
            job_id="otel-dead-ok",
            args=["--steps", "60", "--step-s", "0.02"],
        ) as ok:
            assert ok.wait(120) == [0, 0]
            assert len(ok.events("done")) == 2
        assert sc.incidents() == []
        # ... and a hang is killed on time.
        with Workers(2, sc.target, short_tmpdir(), job_id="otel-dead", args=HANG) as w:
            inc = sc.wait_incident(lambda r: r["rule"] == "stall", timeout_s=60)
            seen = time.monotonic()
            # As fast as without telemetry: the threshold plus a few ticks (the margin
            # is for a loaded CI machine).
            assert 3.0 <= inc["detection_latency_s"] < 3.0 + 1.0
            (action,) = wait_for(lambda: sc.incidents("action"), 30, what="action record")
            assert time.monotonic() - seen < 5.0  # SIGTERM kills in well under the grace period
            assert action["incident_id"] == inc["id"] and action["ok"] is True
            codes = w.wait(30)
            assert all(codes[r] is not None for r in inc["targets"])
        wait_for(lambda: "telemetry export to" in sc.log_text(), 30, what="the export warning")
        time.sleep(3.0)  # more failed exports and retries happen meanwhile
        started = time.monotonic()
        assert sc.stop() == 0
        assert time.monotonic() - started < 10.0
    log = sc.log_text()
    failing = [line for line in log.splitlines() if "telemetry export to" in line]
    assert len(failing) == 1, failing
    assert dead in failing[0] and "is failing" in failing[0]
    # The SDK's own per-retry warnings are folded into that one line.
    assert not [line for line in log.splitlines() if " opentelemetry." in line]
    # The incident log is complete: the incident, then its action.
    records = [r["type"] for r in sc.incidents("incident") + sc.incidents("action")]
    assert records == ["incident", "action"]
