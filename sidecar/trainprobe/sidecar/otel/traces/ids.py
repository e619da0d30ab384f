"""Deterministic trace and span ids.

Every sidecar computes the same ids from the same facts, without talking to
the others. That is what lets a backend show all ranks of one job and step in
one trace: the trace id of a step depends only on the job id and the step
number, so the spans that the sidecars of different nodes build for their
ranks' step 100 land in the same trace.

The scheme (documented in docs/OBSERVABILITY.md, versioned by its prefix):

- trace id = BLAKE2b-128 of ``trainprobe/v1 \\x1f step \\x1f <job_id> \\x1f <step>``
  (a job's episode at a summary-mode upstream: ``episode``, the job id and
  the episode id instead of ``step`` and the step)
- span id  = BLAKE2b-64 of ``trainprobe/v1 \\x1f <kind> \\x1f <parts...>``

A zero id is invalid in OpenTelemetry; the (astronomically unlikely) zero
hash is mapped to 1.
"""

from __future__ import annotations

import hashlib

_PREFIX = "trainprobe/v1"
_SEP = "\x1f"


def _hash(size: int, kind: str, parts: tuple[object, ...]) -> int:
    text = _SEP.join((_PREFIX, kind, *(str(p) for p in parts)))
    value = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=size).digest(), "big")
    return value or 1


def step_trace_id(job_id: str, step: int) -> int:
    """The trace id shared by every rank's spans of ``step`` in ``job_id``."""
    return _hash(16, "step", (job_id, int(step)))


def episode_trace_id(job_id: str, episode_id: str) -> int:
    """The trace of a job's episode as a summary-mode upstream saw it."""
    return _hash(16, "episode", (job_id, episode_id))


def span_id(kind: str, *parts: object) -> int:
    """A 64-bit span id for the span of ``kind`` identified by ``parts``."""
    return _hash(8, kind, parts)


def trace_id_hex(trace_id: int) -> str:
    """The 32-hex-digit form backends search by (W3C traceparent, OTLP/JSON)."""
    return f"{trace_id:032x}"


def span_id_hex(span_id_value: int) -> str:
    return f"{span_id_value:016x}"
