"""Unit tests of the pure span logic: no OpenTelemetry, no gRPC, hand-built states."""

from __future__ import annotations

import dataclasses
import hashlib

import pytest

from tests.otel_builders import MS, T0, WMM, apply, coll, hello, report
from trainprobe.sidecar.core.session.model import PhaseData, RayIds, Verdict
from trainprobe.sidecar.core.session.registry import Registry
from trainprobe.sidecar.otel import (
    TraceBuilder,
    span_id,
    step_trace_id,
    worker_attributes,
)
from trainprobe.sidecar.otel.traces import builder as trace_builder
from trainprobe.sidecar.otel.traces.worker import RECENT_COLLECTIVES


def test_trace_id_is_the_documented_hash_of_job_and_step() -> None:
    text = "\x1f".join(("trainprobe/v1", "step", "jobA", "100"))
    expected = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=16).digest(), "big")
    assert step_trace_id("jobA", 100) == expected
    assert step_trace_id("jobA", 100) != step_trace_id("jobA", 101)
    assert step_trace_id("jobA", 100) != step_trace_id("jobB", 100)
    assert 0 < span_id("step", "jobA", 0, 1, 100) < 2**64


def test_steps_sampled_every_n_with_the_workers_timing() -> None:
    reg, tb = Registry(), TraceBuilder(every_n_steps=5, local_host="nodeA")
    h = hello()
    state = apply(reg, h, report(1, list(range(1, 11))))
    spans = tb.on_report(state, report(1, list(range(1, 11))), WMM)
    assert [s.attributes["trainprobe.step"] for s in spans] == [5, 10]
    s5 = spans[0]
    assert s5.trace_id == step_trace_id("jobA", 5)
    assert s5.parent_id is None
    # Step 5 ran from T0+40ms to T0+50ms on the worker's clock, mapped to wall time.
    shift = round(state.offset_s * 1e9) + round(WMM * 1e9)
    assert s5.start_ns == T0 + 40 * MS + shift
    assert s5.end_ns == T0 + 50 * MS + shift
    assert s5.attributes["process.pid"] == 4242
    assert s5.attributes["trainprobe.rank"] == 0
    assert "trainprobe.step.sampled" not in s5.attributes  # absent = true
    assert "trainprobe.host" not in s5.attributes  # the resource's host.name names it


def test_ranks_of_one_step_share_a_trace_but_not_span_ids() -> None:
    reg, tb = Registry(), TraceBuilder(every_n_steps=5)
    out = []
    for rank in (0, 1):
        h = hello(rank=rank, pid=100 + rank)
        r = report(1, [4, 5])
        out += tb.on_report(apply(reg, h, r), r, WMM)
    assert len(out) == 2
    assert out[0].trace_id == out[1].trace_id == step_trace_id("jobA", 5)
    assert out[0].span_id != out[1].span_id
    # A restarted process (new pid) repeating step 5 gets new span ids in the same trace.
    h2 = hello(rank=0, pid=999)
    r = report(1, [5])
    again = tb.on_report(apply(Registry(), h2, r), r, WMM)
    assert again[0].trace_id == out[0].trace_id and again[0].span_id != out[0].span_id


def test_every_step_is_traced_while_the_verdict_is_not_ok() -> None:
    reg, tb = Registry(), TraceBuilder(every_n_steps=100)
    h = hello()
    r = report(1, [1, 2, 3])
    state = apply(reg, h, r)
    state.verdict = Verdict.DEGRADED
    spans = tb.on_report(state, r, WMM)
    assert [s.attributes["trainprobe.step"] for s in spans] == [1, 2, 3]
    assert all(s.attributes["trainprobe.step.sampled"] is False for s in spans)


def test_a_resent_report_makes_no_duplicate_spans() -> None:
    reg, tb = Registry(), TraceBuilder(every_n_steps=1)
    h = hello()
    r = report(1, [1, 2], samples=(coll(2, 1, 1, 1),))
    state = apply(reg, h, r)
    assert len(tb.on_report(state, r, WMM)) == 3
    assert tb.on_report(state, r, WMM) == []
    again = report(2, [3], samples=(coll(2, 1, 1, 1), coll(3, 2, 1, 1)))
    spans = tb.on_report(apply(reg, h, again), again, WMM)
    assert sorted(s.attributes.get("trainprobe.collective.seq", 0) for s in spans) == [0, 2]


def test_a_step_number_repeated_is_traced_once() -> None:
    # A hook whose step numbers stay at 0 (or a client's garbage) sends many step
    # times under one number: each was traced as a sampled step 0, 1,000 spans in
    # one report, which overflowed the span queue and held the loop ~40 ms a report.
    reg, tb = Registry(), TraceBuilder(every_n_steps=100)
    base = report(1, list(range(1, 1001)))
    r = dataclasses.replace(base, recent_steps=(0,) * 1000, last_step=0, total_steps=0)
    spans = tb.on_report(apply(reg, hello(), r), r, WMM)
    assert [s.attributes["trainprobe.step"] for s in spans] == [0]


def test_the_workers_remembered_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trace_builder, "MAX_WORKERS", 3)
    reg, tb = Registry(), TraceBuilder(every_n_steps=100)
    hellos = [hello(rank=0, pid=100 + n, job=f"job{n}") for n in range(5)]
    for h in hellos:
        r = report(1, [1])
        tb.on_report(apply(reg, h, r), r, WMM)
    assert len(tb) == 3
    # The first met went first; the latest are kept with their steps.
    assert tb.known(hellos[0]) is None and tb.known(hellos[1]) is None
    kept = tb.known(hellos[4])
    assert kept is not None and [s.number for s in kept.steps] == [1]


def test_collectives_become_children_of_their_step_whenever_they_arrive() -> None:
    reg, tb = Registry(), TraceBuilder(every_n_steps=2)
    h = hello()
    early = coll(2, seq=7, start_ms=3, dur_ms=4)  # reported before step 2 ends
    r1 = report(1, [1], samples=(early,))
    state = apply(reg, h, r1)
    assert tb.on_report(state, r1, WMM) == []  # held: its step is still running
    late = coll(2, seq=8, start_ms=8, dur_ms=1.5)  # reported after step 2 ended
    skipped = coll(3, seq=9, start_ms=2, dur_ms=1)  # step 3 is not sampled
    r2 = report(2, [2])
    spans = tb.on_report(apply(reg, h, r2), r2, WMM)
    step2 = next(s for s in spans if s.name == "step")
    children = [s for s in spans if s.name == "allreduce"]
    assert [c.attributes["trainprobe.collective.seq"] for c in children] == [7]
    r3 = report(3, [3], samples=(late, skipped))
    spans3 = tb.on_report(apply(reg, h, r3), r3, WMM)
    assert [c.attributes["trainprobe.collective.seq"] for c in spans3] == [8]
    for c, src in ((children[0], early), (spans3[0], late)):
        assert c.parent_id == step2.span_id and c.trace_id == step2.trace_id
        assert c.end_ns - c.start_ns == src.end_mono_ns - src.start_mono_ns
        assert step2.start_ns < c.start_ns < step2.end_ns
        assert c.attributes["trainprobe.step"] == 2


def test_remembered_collectives_are_bounded() -> None:
    reg, tb = Registry(), TraceBuilder(every_n_steps=1)
    h = hello()
    for k in range(12):  # 200 a report: the most a report may carry is 256
        flood = tuple(
            coll(2, seq=k * 1000 + i, start_ms=1 + k / 10 + i / 10000, dur_ms=0.01)
            for i in range(200)
        )
        r = report(1 + k, [1], samples=flood)
        tb.on_report(apply(reg, h, r), r, WMM)
    wt = tb.known(h)
    assert wt is not None and wt.remembered_collectives >= RECENT_COLLECTIVES
    assert wt.remembered_collectives <= 2 * RECENT_COLLECTIVES
    tb.retain([])  # the registry forgot the worker: so does the builder
    assert len(tb) == 0 and tb.known(h) is None


def test_collectives_arriving_out_of_order_still_find_their_step() -> None:
    reg, tb = Registry(), TraceBuilder(every_n_steps=3)
    h = hello()
    c3 = coll(3, seq=30, start_ms=2, dur_ms=1)
    c2 = coll(2, seq=20, start_ms=2, dur_ms=1)  # older, reported after c3
    r1 = report(1, [1], samples=(c3, c2))
    tb.on_report(apply(reg, h, r1), r1, WMM)
    r2 = report(2, [2, 3])
    spans = tb.on_report(apply(reg, h, r2), r2, WMM)
    colls = [s for s in spans if s.name == "allreduce"]
    assert [c.attributes["trainprobe.collective.seq"] for c in colls] == [30]
    assert colls[0].parent_id == next(s.span_id for s in spans if s.name == "step")


def test_finished_phase_lands_in_the_trace_of_the_step_before_it() -> None:
    reg, tb = Registry(), TraceBuilder(every_n_steps=1000)
    h = hello()
    start = T0 + 50 * MS + 1
    ckpt = PhaseData("checkpoint", start, 60.0, start + 2000 * MS)
    r = report(1, [4, 5], finished=(ckpt,))
    spans = tb.on_report(apply(reg, h, r), r, WMM)
    assert [s.name for s in spans] == ["phase checkpoint"]
    p = spans[0]
    assert p.trace_id == step_trace_id("jobA", 5)
    assert p.end_ns - p.start_ns == 2000 * MS
    assert p.attributes["trainprobe.phase.timeout_s"] == 60.0


def test_worker_attributes_carry_gpu_ray_and_labels() -> None:
    h = hello(
        gpu_uuid="GPU-1234",
        ray=RayIds(job_id="02000000", node_id="n1", actor_id="a1", worker_id="", run_name="r"),
        labels={"k8s.pod.name": "pod-7", "team": "x"},
    )
    a = worker_attributes(h, local_host="sidecar-host")
    assert a["trainprobe.host"] == "nodeA"  # a worker on another host says where
    assert a["hw.id"] == "GPU-1234"
    assert a["trainprobe.ray.job_id"] == "02000000"
    assert a["trainprobe.ray.actor_id"] == "a1"
    assert "trainprobe.ray.worker_id" not in a
    assert a["k8s.pod.name"] == "pod-7" and a["trainprobe.label.team"] == "x"


def test_clock_mapping_is_pinned_and_exact_for_local_workers() -> None:
    reg, tb = Registry(), TraceBuilder(every_n_steps=1)
    h = hello()
    r1 = report(1, [1])
    state = apply(reg, h, r1, now=100.0)
    state.local = True  # same PID namespace: same CLOCK_MONOTONIC, offset exactly 0
    (s1,) = tb.on_report(state, r1, WMM)
    assert s1.end_ns == T0 + 10 * MS + round(WMM * 1e9)
    # A wall-clock reading a few µs different (the two clocks are read apart) moves nothing.
    r2 = report(2, [2])
    (s2,) = tb.on_report(apply(reg, h, r2, now=100.0), r2, WMM + 3e-6)
    assert s2.start_ns == s1.end_ns


def test_a_remembered_collective_keeps_every_field_and_is_never_added_twice() -> None:
    """Collectives are kept as rows of an int array with their names once: what
    comes back is what came in, past-int64 numbers clamped, not a crash."""
    reg, tb = Registry(), TraceBuilder(every_n_steps=2)
    h = hello()
    big = dataclasses.replace(coll(2, seq=2**64 - 1, start_ms=2, dur_ms=1), bytes=2**64 - 1)
    other = dataclasses.replace(coll(2, seq=5, start_ms=2, dur_ms=1), group="tp/pg2", op="gather")
    r1 = report(1, [1], samples=(big, other, other))
    tb.on_report(apply(reg, h, r1), r1, WMM)
    wt = tb.known(h)
    assert wt is not None and wt.remembered_collectives == 2
    r2 = report(2, [2], samples=(other,))  # resent: still two
    spans = tb.on_report(apply(reg, h, r2), r2, WMM)
    assert wt.remembered_collectives == 2
    children = sorted(
        (s.attributes["trainprobe.collective.group"], s.attributes["trainprobe.collective.seq"])
        for s in spans
        if s.name != "step"
    )
    assert children == [("dp", 2**63 - 1), ("tp/pg2", 5)]


def test_a_flood_of_collective_names_keeps_the_names_bounded() -> None:
    reg, tb = Registry(), TraceBuilder(every_n_steps=1000)
    h = hello()
    for k in range(10):
        names = tuple(
            dataclasses.replace(
                coll(2, seq=k * 100 + i, start_ms=1 + k + i / 100, dur_ms=0.01), group=f"g{k}-{i}"
            )
            for i in range(50)
        )
        r = report(1 + k, [1 + k], samples=names)
        tb.on_report(apply(reg, h, r), r, WMM)
    wt = tb.known(h)
    assert wt is not None and len(wt._names) <= 64
    assert wt.remembered_collectives <= 2 * RECENT_COLLECTIVES
