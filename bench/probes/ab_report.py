"""Medians and new/old ratios of bench/probes/device_ab.sh's results.

python bench/probes/ab_report.py OUT_DIR     # prints a Markdown table
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any

#: (bench, label, how to read the figure from its JSON, lower is better)
FIGURES: list[tuple[str, str, Any, bool]] = [
    (
        "hook",
        "on_step_end median, ns (each call timed)",
        lambda d: d["per_call"]["net_median_ns"],
        True,
    ),
    ("hook", "on_step_end p99, ns", lambda d: d["per_call"]["net_p99_ns"], True),
    (
        "hook",
        "on_step_end in batches of 1000, ns/call",
        lambda d: d["batch_ns_per_call_median"],
        True,
    ),
    ("report_path", "per report (parse+convert+apply), µs", lambda d: d["per_report_us"], True),
    ("report_path", "Engine.tick over 2,000 workers, ms", lambda d: d["engine_tick_ms"], True),
    (
        "scale",
        "reports per sidecar CPU-second (largest N)",
        lambda d: d["levels"][-1]["reports_per_cpu_s"],
        False,
    ),
    (
        "scale",
        "report -> verdict lag p99, ms (largest N)",
        lambda d: 1000 * d["levels"][-1]["lag_p99_s"],
        True,
    ),
]


def values(out: Path, side: str, bench: str, read: Any) -> list[float]:
    got = []
    for path in sorted(out.glob(f"{side}-{bench}-*.json")):
        try:
            got.append(float(read(json.loads(path.read_text()))))
        except (KeyError, IndexError, ValueError, TypeError):
            continue
    return got


def main() -> int:
    out = Path(sys.argv[1])
    print("| figure | old (median) | new (median) | new/old | runs |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for bench, label, read, _lower in FIGURES:
        old, new = values(out, "old", bench, read), values(out, "new", bench, read)
        if not old or not new:
            print(f"| {label} | {old or '-'} | {new or '-'} | - | {len(old)}/{len(new)} |")
            continue
        o, n = statistics.median(old), statistics.median(new)
        ratio = n / o if o else float("nan")
        print(f"| {label} | {o:.4g} | {n:.4g} | {ratio:.3f} | {len(old)}/{len(new)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
