"""Stall threshold calibration, as plain functions over step-time samples.

``auto`` follows the design card: ``max(floor_s, p99_factor x p99)`` of the
step times observed, after ``warmup_steps`` samples. Before that the stall
threshold is the start-up timeout, because the first steps (compilation,
allocator warm-up, first checkpoint) are not representative. Like
nvidia-resiliency-ext's timeouts calculation, the job's ranks are merged by
taking the maximum, so one rank's fast steps never tighten another's limit.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


def p99(samples: Iterable[float]) -> float | None:
    """Nearest-rank 99th percentile; None without samples."""
    ordered = sorted(samples)
    if not ordered:
        return None
    return ordered[max(0, math.ceil(0.99 * len(ordered)) - 1)]


@dataclass(frozen=True)
class StallPolicy:
    """How the stall threshold is chosen. ``timeout_s=None`` means auto."""

    timeout_s: float | None = None
    floor_s: float = 30.0
    p99_factor: float = 10.0
    warmup_steps: int = 20
    startup_timeout_s: float = 600.0


@dataclass(frozen=True)
class StallThreshold:
    seconds: float
    #: "explicit", "auto" or "warmup", for the incident's evidence.
    basis: str
    p99_s: float | None = None
    samples: int = 0


def stall_threshold(
    policy: StallPolicy, sample_counts: Sequence[int], p99s: Sequence[float | None]
) -> StallThreshold:
    """The stall threshold for one job, from its ranks' sample counts and p99s."""
    if policy.timeout_s is not None:
        return StallThreshold(policy.timeout_s, "explicit")
    samples = max(sample_counts, default=0)
    known = [p for p in p99s if p is not None]
    if samples < policy.warmup_steps or not known:
        return StallThreshold(policy.startup_timeout_s, "warmup", None, samples)
    job_p99 = max(known)
    return StallThreshold(
        max(policy.floor_s, policy.p99_factor * job_p99), "auto", job_p99, samples
    )
