"""docs/PERFORMANCE.md and its plots, rendered from the benchmarks' results.

    python bench/render.py                 # re-render from bench/results/*.json
    python bench/render.py --check         # exit 1 if docs/PERFORMANCE.md is stale
    python bench/render.py --results DIR --doc OUT.md --plots DIR

`make bench` runs the benchmarks (bench/run_all.py), then this. The whole
document is generated: every figure comes from a result file, which records
the command that produced it and the machine's load; a missing result file is
said so in the document, never filled in. The markdown does not depend on the
plots (tests/unit/test_bench_report.py renders it without matplotlib and
compares it with the committed file).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from perfdoc import (
    CASES,
    DOC,
    RESULTS,
    TOOLS,
    fault_goals,
    faults_section,
    job_scale,
    load,
    markdown,
    plots,
)

# What the tests, bench/perfdoc/figures.py and other callers import from here.
__all__ = [
    "CASES",
    "DOC",
    "RESULTS",
    "TOOLS",
    "fault_goals",
    "faults_section",
    "job_scale",
    "load",
    "main",
    "markdown",
    "plots",
]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--results", default=str(RESULTS))
    p.add_argument("--doc", default=str(DOC))
    p.add_argument("--plots", default="", help="where the PNGs go (default: perf/ beside --doc)")
    p.add_argument("--no-plots", action="store_true")
    p.add_argument("--check", action="store_true", help="only say whether --doc is current")
    args = p.parse_args(argv)
    doc, results = Path(args.doc), Path(args.results)
    text = markdown(results)
    if args.check:
        current = doc.exists() and doc.read_text() == text
        print(f"{doc}: {'current' if current else 'stale: run python bench/render.py'}")
        return 0 if current else 1
    doc.parent.mkdir(parents=True, exist_ok=True)
    doc.write_text(text)
    written = (
        []
        if args.no_plots
        else plots(results, Path(args.plots) if args.plots else doc.parent / "perf")
    )
    print(f"wrote {doc} ({text.count(chr(10))} lines) and {len(written)} plots")
    return 0


if __name__ == "__main__":
    sys.exit(main())
