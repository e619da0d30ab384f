"""Span descriptions: plain data that the OpenTelemetry adapter turns into spans.

Nothing here imports OpenTelemetry. A :class:`SpanDesc` carries everything a
span needs (ids, wall-clock times, attributes, links, an error status), so the
logic that decides *which* spans exist is unit-tested without an SDK.

Times: workers stamp events with their own monotonic clock (``*_mono_ns``);
the sidecar maps them onto its monotonic clock (``WorkerState.to_local``) and
then onto its wall clock. :class:`WallClock` does both steps, so all spans of
one sidecar share one clock and hosts need no clock agreement.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from trainprobe.sidecar.core.session.model import CollectiveData, HelloData, PhaseData
from trainprobe.sidecar.otel.traces.ids import span_id

#: What an attribute value may be (the OpenTelemetry attribute types).
AttrValue = str | bool | int | float | Sequence[str] | Sequence[int] | Sequence[float]
Attributes = Mapping[str, AttrValue]


@dataclass(frozen=True)
class LinkDesc:
    """A link from one span to another (possibly in another trace)."""

    trace_id: int
    span_id: int
    attributes: Attributes


@dataclass(frozen=True)
class SpanDesc:
    """One closed span, described as plain data."""

    name: str
    trace_id: int
    span_id: int
    parent_id: int | None
    start_ns: int
    end_ns: int
    attributes: Attributes
    links: tuple[LinkDesc, ...] = ()
    #: A status description makes the span's status ERROR.
    error: str | None = None

    def link(self, **attributes: AttrValue) -> LinkDesc:
        """A link that points at this span."""
        return LinkDesc(self.trace_id, self.span_id, attributes)

    def ref(self) -> SpanRef:
        """What a later child or link needs of this span, once it is exported."""
        step = self.attributes.get("trainprobe.step", 0)
        return SpanRef(self.trace_id, self.span_id, step if isinstance(step, int) else 0)


@dataclass(frozen=True, slots=True)
class SpanRef:
    """An exported step span as its children and links need it: its ids and step.

    A traced step stays remembered (late collectives become its children,
    incidents link it); keeping the whole :class:`SpanDesc`, with its copy of
    the worker's attributes, cost ~1 KB a traced step, eight a worker.
    """

    trace_id: int
    span_id: int
    step: int

    @property
    def attributes(self) -> Attributes:
        return {"trainprobe.step": self.step}

    def link(self, **attributes: AttrValue) -> LinkDesc:
        """A link that points at this span."""
        return LinkDesc(self.trace_id, self.span_id, attributes)


@dataclass(frozen=True)
class WallClock:
    """Maps sidecar monotonic seconds and worker monotonic ns to wall-clock ns.

    ``wall_minus_mono_s`` is the sidecar's ``time.time() - time.monotonic()``;
    ``worker_offset_s`` is the worker's ``WorkerState.offset_s``.
    """

    wall_minus_mono_s: float
    worker_offset_s: float = 0.0

    def local_ns(self, sidecar_mono_s: float) -> int:
        # Rounded separately: a duration between two mapped times stays exact.
        return round(sidecar_mono_s * 1e9) + round(self.wall_minus_mono_s * 1e9)

    def worker_ns(self, worker_mono_ns: int) -> int:
        return (
            worker_mono_ns + round(self.worker_offset_s * 1e9) + round(self.wall_minus_mono_s * 1e9)
        )


def worker_attributes(hello: HelloData, local_host: str = "") -> dict[str, AttrValue]:
    """Attributes that identify a worker on each of its spans.

    Few on purpose: the OTLP encoder costs about 6 µs per attribute and span.
    The worker's host is added only when it is not the sidecar's own
    (``local_host``, which the resource's ``host.name`` already names).
    """
    attrs: dict[str, AttrValue] = {
        "trainprobe.job_id": hello.job_id,
        "trainprobe.rank": hello.rank,
        "process.pid": hello.pid,
    }
    if hello.host and hello.host != local_host:
        attrs["trainprobe.host"] = hello.host
    if hello.gpu_uuid:
        attrs["hw.id"] = hello.gpu_uuid
    ray = hello.ray
    for name, value in (
        ("job_id", ray.job_id),
        ("node_id", ray.node_id),
        ("actor_id", ray.actor_id),
        ("worker_id", ray.worker_id),
        ("run_name", ray.run_name),
    ):
        if value:
            attrs[f"trainprobe.ray.{name}"] = value
    for key, value in hello.labels.items():
        # Namespaced keys (k8s.pod.name) are semantic conventions: keep them.
        attrs[key if "." in key else f"trainprobe.label.{key}"] = value
    return attrs


def step_span_id(hello: HelloData, step: int, open_: bool = False) -> int:
    # The pid keeps a restarted job's repeated step numbers apart.
    kind = "open-step" if open_ else "step"
    return span_id(kind, hello.job_id, hello.rank, hello.pid, step)


def step_span(
    hello: HelloData,
    attrs: Attributes,
    trace_id: int,
    step: int,
    start_ns: int,
    end_ns: int,
    counted: bool,
    sampled: bool,
) -> SpanDesc:
    """A completed step. Flags are set only when false (absent = true): ``counted``
    is false if the hook left the step out of step times (it overlapped a
    phase), ``sampled`` is false if it was traced because of trouble."""
    attributes = {**attrs, "trainprobe.step": step}
    if not counted:
        attributes["trainprobe.step.counted"] = False
    if not sampled:
        attributes["trainprobe.step.sampled"] = False
    return SpanDesc(
        name="step",
        trace_id=trace_id,
        span_id=step_span_id(hello, step),
        parent_id=None,
        start_ns=start_ns,
        end_ns=end_ns,
        attributes=attributes,
    )


def open_step_span(
    hello: HelloData,
    attrs: Attributes,
    trace_id: int,
    step: int,
    start_ns: int,
    end_ns: int,
    why: str,
) -> SpanDesc:
    """A step that had not completed when a rule fired; it ends at the detection."""
    return SpanDesc(
        name="step",
        trace_id=trace_id,
        span_id=step_span_id(hello, step, open_=True),
        parent_id=None,
        start_ns=start_ns,
        end_ns=max(start_ns, end_ns),
        attributes={**attrs, "trainprobe.step": step, "trainprobe.step.complete": False},
        error=f"step {step} did not complete: {why}",
    )


def collective_span(
    hello: HelloData,
    attrs: Attributes,
    parent: SpanDesc | SpanRef,
    c: CollectiveData,
    clock: WallClock,
) -> SpanDesc:
    """One gradient-sync bucket or user collective, as a child of its step."""
    return SpanDesc(
        name=c.op or "collective",
        trace_id=parent.trace_id,
        span_id=span_id("collective", hello.job_id, hello.rank, hello.pid, c.group, c.seq),
        parent_id=parent.span_id,
        start_ns=clock.worker_ns(c.start_mono_ns),
        end_ns=clock.worker_ns(max(c.end_mono_ns, c.start_mono_ns)),
        attributes={
            **attrs,
            "trainprobe.step": parent.attributes.get("trainprobe.step", c.step),
            "trainprobe.collective.group": c.group,
            "trainprobe.collective.seq": c.seq,
            "trainprobe.collective.op": c.op,
            "trainprobe.collective.bytes": c.bytes,
        },
    )


def open_collective_span(
    hello: HelloData,
    attrs: Attributes,
    parent: SpanDesc | SpanRef,
    group: str,
    seq: int,
    op: str,
    start_ns: int,
    end_ns: int,
) -> SpanDesc:
    """A collective still in flight when a rule fired."""
    return SpanDesc(
        name=op or "collective",
        trace_id=parent.trace_id,
        span_id=span_id("open-collective", hello.job_id, hello.rank, hello.pid, group, seq),
        parent_id=parent.span_id,
        start_ns=start_ns,
        end_ns=max(start_ns, end_ns),
        attributes={
            **attrs,
            "trainprobe.step": parent.attributes.get("trainprobe.step", 0),
            "trainprobe.collective.group": group,
            "trainprobe.collective.seq": seq,
            "trainprobe.collective.op": op,
            "trainprobe.collective.complete": False,
        },
        error=f"collective {op or group}#{seq} still in flight",
    )


def phase_span(
    hello: HelloData,
    attrs: Attributes,
    trace_id: int,
    step: int,
    phase: PhaseData,
    start_ns: int,
    end_ns: int,
    open_: bool = False,
) -> SpanDesc:
    """A declared phase (checkpoint, eval...); open ones end at the detection."""
    return SpanDesc(
        name=f"phase {phase.name}",
        trace_id=trace_id,
        span_id=span_id(
            "open-phase" if open_ else "phase",
            hello.job_id,
            hello.rank,
            hello.pid,
            phase.name,
            phase.start_mono_ns,
        ),
        parent_id=None,
        start_ns=start_ns,
        end_ns=max(start_ns, end_ns),
        attributes={
            **attrs,
            "trainprobe.step": step,
            "trainprobe.phase.name": phase.name,
            "trainprobe.phase.timeout_s": phase.timeout_s,
            "trainprobe.phase.complete": not open_,
        },
        error=f"phase {phase.name} overran" if open_ else None,
    )
