"""bench/ stays as its map says: every script `make bench` runs exists where
run_all.py looks for it, every module bench/README.md names is there, and
bench/'s top holds the benchmarks, the runner and the renderer, the code they
share being in bench/harness/.

A probe moved to bench/probes/ (or a benchmark renamed) without its caller
following would only fail hours into `make bench`; here it fails at once.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
sys.path.insert(0, str(BENCH))

import run_all  # noqa: E402


def test_every_script_run_all_runs_exists() -> None:
    scripts = [script for _, script, _, _ in run_all.BENCHES] + [a[0] for a in run_all.EXTRA]
    missing = sorted({s for s in scripts if not (run_all.HERE / s).is_file()})
    assert not missing, f"run_all.py runs scripts that are not in bench/: {missing}"


def test_every_module_the_bench_readme_names_exists() -> None:
    named = set(re.findall(r"`([\w/]+\.(?:py|sh))`", (BENCH / "README.md").read_text()))
    assert len(named) > 20, named  # the map names the modules, not a handful
    missing = sorted(
        n for n in named if not (BENCH / n).is_file() and not (BENCH / "probes" / n).is_file()
    )
    assert not missing, f"bench/README.md names modules that are not there: {missing}"


#: bench/'s top besides the headline benchmarks (bench_*.py): the runner, the
#: renderer, and session_structures.py (a figure of its own on the page).
TOP = {"run_all.py", "render.py", "session_structures.py"}


def test_the_harness_is_in_one_place() -> None:
    top = sorted(p.name for p in BENCH.glob("*.py"))
    stray = [n for n in top if not n.startswith("bench_") and n not in TOP]
    assert not stray, f"harness code belongs in bench/harness/: {stray}"
    harness = sorted(p.stem for p in (BENCH / "harness").glob("*.py"))
    assert {"common", "loadgen", "relay_loadgen", "sim_worker"} <= set(harness), harness
