"""Unit tests of incident, evidence and action spans, from real rule evaluations.

States are built by the pure registry and judged by the real rules; only time
is driven by hand. No OpenTelemetry is involved.
"""

from __future__ import annotations

import json
from dataclasses import replace

from tests.otel_builders import MS, T0, WMM, coll, hello, report
from trainprobe.sidecar.core.incident.incidents import FindingEdges, Incident, group_incidents
from trainprobe.sidecar.core.judge.rules import RuleConfig, evaluate
from trainprobe.sidecar.core.session.model import GroupSeqData, PhaseData, ReportData, SyncData
from trainprobe.sidecar.core.session.registry import Registry
from trainprobe.sidecar.core.session.thresholds import StallPolicy
from trainprobe.sidecar.otel import IncidentTracer, TraceBuilder, span_id, step_trace_id
from trainprobe.sidecar.otel.traces.incident_spans import incident_step

RULES = RuleConfig(
    heartbeat_timeout_s=60, stall=StallPolicy(timeout_s=3.0), sync_timeout_s=600, sync_latency_s=0.5
)


def judge(reg: Registry, now: float) -> list[Incident]:
    workers = list(reg)
    fresh = FindingEdges().new_findings(evaluate(workers, RULES, now))
    incidents = group_incidents(fresh, {w.key: w for w in workers}, now, wall_now=now + WMM)
    for inc in incidents:
        inc.action = "kill"
    return incidents


def with_inflight(r: ReportData, start_ns: int) -> ReportData:
    group = GroupSeqData(
        "dp",
        issued=10,
        completed=9,
        oldest_inflight_start_mono_ns=start_ns,
        inflight_op="allreduce",
        inflight_seq=10,
    )
    return replace(r, sync=SyncData(groups=(group,)))


def hung_job(tb: TraceBuilder) -> tuple[Registry, list[Incident]]:
    """Two ranks finish step 9 then stop; rank 0 sits in the step-10 allreduce."""
    reg = Registry()
    for rank in (0, 1):
        h = hello(rank=rank, pid=100 + rank, gpu_uuid=f"GPU-{rank}")
        r = report(1, list(range(1, 10)))
        if rank == 0:
            r = with_inflight(r, T0 + 92 * MS)
        state = reg.open(h, 10.0)
        reg.apply(state, r, 10.0)
        tb.on_report(state, r, WMM)
    return reg, judge(reg, now=10.0 + 5.0)


def test_stall_incident_links_each_ranks_unfinished_step_in_one_trace() -> None:
    tb = TraceBuilder(every_n_steps=100)
    tracer = IncidentTracer(tb)
    reg, incidents = hung_job(tb)
    assert [(i.rule, i.ranks) for i in incidents] == [("stall", [0, 1])]
    inc = incidents[0]
    states = {w.key: w for w in reg}
    assert incident_step(inc, states) == 10
    spans = tracer.on_incident(inc, states, WMM)
    by_name: dict[str, list] = {}
    for s in spans:
        by_name.setdefault(s.name, []).append(s)
    incident = by_name["incident HUNG stall"][0]
    assert incident.trace_id == step_trace_id("jobA", 10)
    open_steps = [
        s for s in by_name["step"] if s.attributes.get("trainprobe.step.complete") is False
    ]
    last_steps = [s for s in by_name["step"] if s.attributes["trainprobe.step"] == 9]
    assert sorted(s.attributes["trainprobe.rank"] for s in open_steps) == [0, 1]
    assert all(s.trace_id == incident.trace_id and s.error for s in open_steps)
    # The unfinished step starts where step 9 ended and ends at the detection.
    for s in open_steps:
        last = next(
            x
            for x in last_steps
            if x.attributes["trainprobe.rank"] == s.attributes["trainprobe.rank"]
        )
        assert s.start_ns == last.end_ns
        assert s.end_ns == round((inc.detected_at + WMM) * 1e9)
    inflight = by_name["allreduce"][0]
    assert inflight.parent_id == next(
        s.span_id for s in open_steps if s.attributes["trainprobe.rank"] == 0
    )
    assert inflight.attributes["trainprobe.collective.complete"] is False
    linked = {(link.span_id, link.attributes["trainprobe.link"]) for link in incident.links}
    assert {(s.span_id, "unfinished") for s in open_steps} <= linked
    assert {(s.span_id, "last") for s in last_steps} <= linked
    assert (inflight.span_id, "in flight") in linked
    a = incident.attributes
    assert a["trainprobe.rule"] == "stall" and a["trainprobe.verdict"] == "HUNG"
    assert a["trainprobe.ranks"] == [0, 1] and a["trainprobe.pids"] == [100, 101]
    assert a["trainprobe.evidence.1.step"] == 9
    assert a["trainprobe.evidence.0.step_age_s"] >= 3.0
    assert json.loads(a["trainprobe.evidence"])["1"]["basis"]
    assert "process.pid" not in a  # two workers: their pids are in trainprobe.pids
    assert incident.start_ns < incident.end_ns  # onset .. detection
    assert incident.error


def test_action_span_is_a_child_of_its_incident_with_the_outcome() -> None:
    tb = TraceBuilder()
    tracer = IncidentTracer(tb)
    reg, (inc,) = hung_job(tb)
    incident = next(
        s
        for s in tracer.on_incident(inc, {w.key: w for w in reg}, WMM)
        if s.name.startswith("incident")
    )
    record = {"ok": False, "outcomes": {"1": {"pid": 101, "exited": False, "error": "EPERM"}}}
    action = tracer.action_span(
        inc, record, now_local=inc.detected_at + 0.25, wall_minus_mono_s=WMM
    )
    assert action is not None
    assert action.name == "action kill"
    assert (action.trace_id, action.parent_id) == (incident.trace_id, incident.span_id)
    assert action.span_id == span_id("action", incident.span_id)
    assert action.end_ns - action.start_ns == 250 * MS
    assert action.attributes["trainprobe.outcome.1.error"] == "EPERM"
    assert action.attributes["trainprobe.action.ok"] is False and action.error


def test_two_incidents_share_the_unfinished_step_span() -> None:
    tb = TraceBuilder()
    tracer = IncidentTracer(tb)
    reg, (inc,) = hung_job(tb)
    states = {w.key: w for w in reg}
    first = tracer.on_incident(inc, states, WMM)
    inc2 = Incident(**{**inc.__dict__, "id": inc.id + "b", "rule": "heartbeat"})
    second = tracer.on_incident(inc2, states, WMM)
    assert [s.name for s in second] == [f"incident {inc2.verdict.value} heartbeat"]
    opened = {s.span_id for s in first if s.attributes.get("trainprobe.step.complete") is False}
    assert opened <= {link.span_id for link in second[0].links}


def test_single_rank_incident_carries_the_workers_identity() -> None:
    tb = TraceBuilder()
    reg = Registry()
    h = hello(rank=1, pid=555, gpu_uuid="GPU-abc")
    state = reg.open(h, 10.0)
    reg.apply(state, report(1, [1, 2, 3]), 10.0)
    (inc,) = judge(reg, now=20.0)
    spans = IncidentTracer(tb).on_incident(inc, {state.key: state}, WMM)
    incident = spans[-1]
    assert incident.attributes["process.pid"] == 555
    assert incident.attributes["hw.id"] == "GPU-abc"
    assert incident.attributes["trainprobe.rank"] == 1


def test_degraded_sync_latency_traces_the_slow_window_and_links_the_slowest_collective() -> None:
    tb = TraceBuilder(every_n_steps=1000)
    reg = Registry()
    h = hello()
    state = reg.open(h, 10.0)
    r1 = report(1, [1, 2, 3])
    reg.apply(state, r1, 10.0)
    tb.on_report(state, r1, WMM)
    slow = coll(5, seq=3, start_ms=1, dur_ms=800, step_ms=1000)
    fast = coll(5, seq=4, start_ms=900, dur_ms=5, step_ms=1000)
    r2 = report(2, [4, 5], step_ms=1000, samples=(slow, fast))
    r2 = replace(r2, sync=SyncData(count=2, max_s=0.8, p50_s=0.4, samples=(slow, fast)))
    reg.apply(state, r2, 11.0)
    assert tb.on_report(state, r2, WMM) == []  # nothing sampled yet
    (inc,) = judge(reg, now=11.1)
    assert (inc.rule, inc.verdict.value) == ("sync_latency", "DEGRADED")
    spans = IncidentTracer(tb).on_incident(inc, {state.key: state}, WMM)
    steps = [s for s in spans if s.name == "step"]
    colls = [s for s in spans if s.name == "allreduce"]
    assert [s.attributes["trainprobe.step"] for s in steps] == [4, 5]
    assert sorted(c.attributes["trainprobe.collective.seq"] for c in colls) == [3, 4]
    incident = spans[-1]
    assert incident.trace_id == step_trace_id("jobA", 5) and incident.error is None
    slow_span = next(c for c in colls if c.attributes["trainprobe.collective.seq"] == 3)
    kinds = {link.attributes["trainprobe.link"]: link.span_id for link in incident.links}
    assert kinds["slowest collective"] == slow_span.span_id


def test_phase_overrun_links_an_open_phase_span() -> None:
    tb = TraceBuilder()
    reg = Registry()
    h = hello()
    state = reg.open(h, 10.0)
    start = T0 + 31 * MS
    r = report(1, [1, 2, 3])
    r = replace(r, active_phases=(PhaseData("checkpoint", start, 2.0),))
    reg.apply(state, r, 10.0)
    tb.on_report(state, r, WMM)
    (inc,) = judge(reg, now=10.0 + 4.0)
    assert inc.rule == "phase_overrun"
    spans = IncidentTracer(tb).on_incident(inc, {state.key: state}, WMM)
    phase = next(s for s in spans if s.name == "phase checkpoint")
    assert phase.attributes["trainprobe.phase.complete"] is False and phase.error
    assert phase.span_id in {link.span_id for link in spans[-1].links}


def test_the_incident_span_carries_the_decision_to_kill_now_or_wait() -> None:
    tb = TraceBuilder()
    tracer = IncidentTracer(tb)
    reg, (inc,) = hung_job(tb)
    inc.decision = {"act": False, "rule": "", "definitive": False, "why": "ambiguous: sleep"}
    inc.decision |= {"patience_s": 90.0, "patience_basis": "floor", "evidence": {"1": {}}}
    span = next(
        s
        for s in tracer.on_incident(inc, {w.key: w for w in reg}, WMM)
        if s.name.startswith("incident")
    )
    a = span.attributes
    assert a["trainprobe.decision.act"] is False and a["trainprobe.decision.patience_s"] == 90.0
    assert a["trainprobe.decision.why"] == "ambiguous: sleep"
    assert json.loads(str(a["trainprobe.decision"]))["evidence"] == {"1": {}}
