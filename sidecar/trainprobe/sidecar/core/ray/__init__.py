"""Ray's own analyses, as plain data: a snapshot of what Ray is doing, wait
cycles, placement groups that never start, a finding as an incident, and the
decisions of a kill through Ray.

It may import ``session``, ``judge``, ``job``, ``incident``, ``hang``, the
modules at the top of ``core/`` and the standard library, nothing else:
tests/test_import_cycles.py checks it.
"""

from typing import TYPE_CHECKING

from trainprobe.sidecar.core.lazy import lazy_exports

if TYPE_CHECKING:
    from trainprobe.sidecar.core.ray.kill import (
        RayKillPlan,
        actor_summary,
        kill_settled,
        plan_ray_kill,
    )

__all__ = ["RayKillPlan", "actor_summary", "kill_settled", "plan_ray_kill"]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "RayKillPlan": "kill",
        "actor_summary": "kill",
        "kill_settled": "kill",
        "plan_ray_kill": "kill",
    },
)
