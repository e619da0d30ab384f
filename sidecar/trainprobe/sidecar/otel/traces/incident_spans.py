"""Incident and action spans, and the spans of the steps that triggered them.

An incident lands in the trace of the step it concerns (see
:func:`incident_step`), so a backend shows it next to every rank's spans of
that step. For each rank it names, the step that crossed the rule is traced:

- HUNG, UNRESPONSIVE, DEAD: the step that never finished, as an *open* step
  span from the last step's end to the detection, with the collectives still
  in flight (or the overrunning phase) as its children; plus the last
  completed step;
- DEGRADED: the steps of the report window that crossed the rule, with the
  slowest collective of that window.

The incident span links to all of them. Its action, once carried out, becomes
a child span (:meth:`IncidentTracer.action_span`). What the incident and the
action say as attributes is ``incident_attrs.py``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping

from trainprobe.sidecar.core.incident.incidents import Incident
from trainprobe.sidecar.core.session.model import (
    CollectiveData,
    Verdict,
    WorkerKey,
    WorkerState,
    sample_duration_ns,
)
from trainprobe.sidecar.otel.traces.builder import TraceBuilder
from trainprobe.sidecar.otel.traces.ids import span_id, step_trace_id
from trainprobe.sidecar.otel.traces.incident_attrs import (
    action_attributes,
    incident_attributes,
    json_attribute,
    link_why,
)
from trainprobe.sidecar.otel.traces.spans import (
    AttrValue,
    LinkDesc,
    SpanDesc,
    WallClock,
    open_collective_span,
    open_step_span,
    phase_span,
)
from trainprobe.sidecar.otel.traces.worker import WorkerTrace

__all__ = [
    "LINKED_WINDOW_STEPS",
    "STOPPED",
    "IncidentTracer",
    "incident_attributes",
    "incident_step",
]

#: Verdicts that mean the worker stopped making progress.
STOPPED = frozenset({Verdict.HUNG, Verdict.UNRESPONSIVE, Verdict.DEAD})
#: Window steps linked per rank for a DEGRADED incident.
LINKED_WINDOW_STEPS = 8
_REMEMBERED = 1024


def incident_step(incident: Incident, states: Mapping[WorkerKey, WorkerState]) -> int:
    """The step an incident concerns: the unfinished one, or the last finished one."""
    steps = []
    for rank in incident.ranks:
        st = states.get(WorkerKey(incident.job_id, rank))
        if st is None:
            continue
        if incident.verdict in STOPPED:
            steps.append(st.last_step + 1 if st.has_step else 0)
        else:
            steps.append(st.last_step if st.has_step else 0)
    return min(steps, default=0)


class IncidentTracer:
    """Builds incident, evidence and action spans on top of a :class:`TraceBuilder`."""

    def __init__(self, builder: TraceBuilder) -> None:
        self.builder = builder
        self._incidents: OrderedDict[str, tuple[int, int]] = OrderedDict()

    def on_incident(
        self,
        incident: Incident,
        states: Mapping[WorkerKey, WorkerState],
        wall_minus_mono_s: float,
    ) -> list[SpanDesc]:
        out: list[SpanDesc] = []
        links: list[LinkDesc] = []
        for rank in incident.ranks:
            st = states.get(WorkerKey(incident.job_id, rank))
            if st is None:
                continue
            wt = self.builder.worker(st.hello)
            clock = wt.clock(st, wall_minus_mono_s)
            if incident.verdict in STOPPED:
                self._stopped(incident, st, wt, clock, out, links)
            else:
                self._degraded(st, wt, clock, out, links)
        step = incident_step(incident, states)
        trace_id = step_trace_id(incident.job_id, step)
        sid = span_id("incident", incident.job_id, incident.id, round(incident.time * 1e6))
        self._incidents[incident.id] = (trace_id, sid)
        if len(self._incidents) > _REMEMBERED:
            self._incidents.popitem(last=False)
        clock = WallClock(wall_minus_mono_s)
        attrs: dict[str, AttrValue] = {}
        if len(incident.ranks) == 1:
            attrs = self._builder_attrs(states.get(WorkerKey(incident.job_id, incident.ranks[0])))
        out.append(
            SpanDesc(
                name=f"incident {incident.verdict.value} {incident.rule}",
                trace_id=trace_id,
                span_id=sid,
                parent_id=None,
                start_ns=clock.local_ns(min(incident.onset_at, incident.detected_at)),
                end_ns=clock.local_ns(incident.detected_at),
                attributes={**attrs, **incident_attributes(incident, step)},
                links=tuple(links),
                error=(
                    f"{incident.verdict.value} ({incident.rule}) on ranks {incident.ranks}"
                    if incident.verdict in STOPPED
                    else None
                ),
            )
        )
        return out

    def action_span(
        self,
        incident: Incident,
        record: Mapping[str, object],
        now_local: float,
        wall_minus_mono_s: float,
    ) -> SpanDesc | None:
        """The action's outcome as a child of its incident span."""
        ids = self._incidents.get(incident.id)
        if ids is None:
            return None
        trace_id, parent = ids
        clock = WallClock(wall_minus_mono_s)
        ok = bool(record.get("ok"))
        attrs = action_attributes(incident, record)
        outcomes = record.get("outcomes")
        evicted = record.get("evicted_replicas")
        return SpanDesc(
            name=str(record["summary"])
            if isinstance(evicted, list) and record.get("summary")
            else f"action {incident.action}",
            trace_id=trace_id,
            span_id=span_id("action", parent),
            parent_id=parent,
            start_ns=clock.local_ns(incident.detected_at),
            end_ns=clock.local_ns(max(now_local, incident.detected_at)),
            attributes=attrs,
            error=None if ok else f"{incident.action} did not complete: {json_attribute(outcomes)}",
        )

    def _builder_attrs(self, st: WorkerState | None) -> dict[str, AttrValue]:
        return dict(self.builder.worker(st.hello).attrs) if st is not None else {}

    def _stopped(
        self,
        incident: Incident,
        st: WorkerState,
        wt: WorkerTrace,
        clock: WallClock,
        out: list[SpanDesc],
        links: list[LinkDesc],
    ) -> None:
        rank = st.hello.rank
        last = wt.last_record()
        if last is not None:
            out.extend(self.builder.trace_step(wt, last, clock))
            if last.span is not None:
                links.append(last.span.link(**link_why(rank, "last")))
        number = st.last_step + 1 if st.has_step else 0
        if wt.last_end_mono_ns is not None:
            start_ns = clock.worker_ns(wt.last_end_mono_ns)
        else:
            start_ns = clock.local_ns(st.last_step_at if st.has_step else st.first_seen_at)
        end_local = st.ended_at if incident.rule == "exit" and st.ended_at else incident.detected_at
        step = wt.open_spans.get(("step", number))
        if step is None:
            step = open_step_span(
                st.hello,
                wt.attrs,
                step_trace_id(st.hello.job_id, number),
                number,
                start_ns,
                clock.local_ns(end_local),
                why=f"{incident.verdict.value} ({incident.rule})",
            )
            wt.remember(("step", number), step)
            out.append(step)
        links.append(step.link(**link_why(rank, "unfinished")))
        report = st.last_report
        for g in report.sync.groups if report is not None and report.sync is not None else ():
            if not g.oldest_inflight_start_mono_ns:
                continue
            key = ("collective", (g.group, g.inflight_seq))
            span = wt.open_spans.get(key)
            if span is None:
                span = open_collective_span(
                    st.hello,
                    wt.attrs,
                    step,
                    g.group,
                    g.inflight_seq,
                    g.inflight_op,
                    clock.worker_ns(g.oldest_inflight_start_mono_ns),
                    clock.local_ns(end_local),
                )
                wt.remember(key, span)
                out.append(span)
            links.append(span.link(**link_why(rank, "in flight")))
        for p in report.active_phases if report is not None else ():
            key = ("phase", (p.name, p.start_mono_ns))
            span = wt.open_spans.get(key)
            if span is None:
                span = phase_span(
                    st.hello,
                    wt.attrs,
                    step.trace_id,
                    number,
                    p,
                    clock.worker_ns(p.start_mono_ns),
                    clock.local_ns(end_local),
                    open_=True,
                )
                wt.remember(key, span)
                out.append(span)
            links.append(span.link(**link_why(rank, "phase")))

    def _degraded(
        self,
        st: WorkerState,
        wt: WorkerTrace,
        clock: WallClock,
        out: list[SpanDesc],
        links: list[LinkDesc],
    ) -> None:
        report = st.last_report
        if report is None:
            return
        rank = st.hello.rank
        window = set(zip(report.recent_steps, report.recent_step_end_mono_ns, strict=False))
        recs = [r for r in wt.steps if (r.number, r.end_mono_ns) in window]
        for rec in recs:
            out.extend(self.builder.trace_step(wt, rec, clock))
        for rec in recs[-LINKED_WINDOW_STEPS:]:
            if rec.span is not None:
                links.append(rec.span.link(**link_why(rank, "window")))
        samples = report.sync.samples if report.sync is not None else ()
        if samples:
            slowest = max(samples, key=sample_duration_ns)
            link = self._collective_link(wt, slowest, clock, out)
            if link is not None:
                links.append(link)

    def _collective_link(
        self, wt: WorkerTrace, c: CollectiveData, clock: WallClock, out: list[SpanDesc]
    ) -> LinkDesc | None:
        rec = wt.step_at(c.start_mono_ns)
        if rec is None:
            return None
        out.extend(self.builder.trace_step(wt, rec, clock))
        if rec.span is None:
            return None
        h = wt.hello
        return LinkDesc(
            rec.span.trace_id,
            span_id("collective", h.job_id, h.rank, h.pid, c.group, c.seq),
            {"trainprobe.rank": h.rank, "trainprobe.link": "slowest collective"},
        )
