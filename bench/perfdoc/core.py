"""What every section of docs/PERFORMANCE.md shares: the paths, the names of
tools and cases, and the table and number formats."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "bench" / "results"
DOC = REPO / "docs" / "PERFORMANCE.md"
Result = dict[str, Any]
Lines = list[str]
TOOLS = {
    "tp_explicit": "trainprobe, explicit",
    "tp_auto": "trainprobe, auto",
    "tp_default": "trainprobe, shipped defaults",
    "tp_watch": "trainprobe + watch_ddp",
    "tp": "trainprobe",
    "nvrx": "NVRx",
    "gloo": "gloo timeout + torchrun",
}
HANGS = {"sleep": "sleep inside a step", "stop": "SIGSTOP", "skip": "missing from an allreduce"}
CASES = {
    "sleep": "sleep forever in the step",
    "stop": "SIGSTOP",
    "lock": "deadlock on a lock",
    "gil": "C call holding the GIL",
    "kill9": "killed -9, peers block",
    "skip": "missing from a collective",
    "mismatch": "mismatched collectives",
    "stall8": "one rank stalls 8 s (read)",
    "stall30": "one rank stalls 30 s (sleep)",
    "stall60": "one rank stalls 60 s (read)",
    "eval": "undeclared 40 s eval, collectives",
    "ckpt_phase": "40 s checkpoint in a phase",
    "ckpt_out": "40 s checkpoint, no phase",
    "compile60": "60 s compile warm-up",
    "slow2x": "one rank 2x slower",
    "sidecar_frozen": "sidecar frozen 30 s",
}
DEFINITIVE = ("stop", "kill9", "mismatch")
#: Results written before their benchmark recorded its command: the command as run.
COMMANDS = {"sync_gpu": "python bench/bench_sync_gpu.py --json bench/results/sync_gpu.json"}
#: Results merged from several runs, by the command they recorded: how to read it.
MERGED = {
    "python bench/bench_faults.py --tools tp_watch,tp --trials 10 --ranks 2,4 --parallel 14 (": (
        "python bench/bench_faults.py --parallel 14 --json bench/results/faults.json",
        "The committed result merges three runs of it: trainprobe (`--tools tp_watch,tp --trials"
        " 10 --ranks 2,4`), its eval and mismatch cases once more (`--cases eval,mismatch --seed"
        " 13`), the baselines (`--tools nvrx,gloo --baseline-trials 3 --ranks 2 --seed 14`);"
        " load average 20–56 during them.",
    )
}


def s(x: float | None, unit: str = " s", digits: int = 2) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    return "never" if math.isinf(x) else f"{x:.{digits}f}{unit}"


def us(ns: float) -> str:
    u = ns / 1000
    return f"{u:.3f} µs" if u < 10 else f"{u:.1f} µs" if u < 100 else f"{u:.0f} µs"


def row(*cells: object) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def head(*names: str) -> Lines:
    return [row(*names), "|" + " --- |" * len(names)]


def yes(ok: bool) -> str:
    return "**met**" if ok else "**missed**"


def command(r: Result, name: str) -> str:
    """The result's command, relative to the repository (results are often made
    in another checkout or written to /tmp first), writing to the committed file."""
    cmd = r.get("command") or COMMANDS.get(name, "")
    cmd = re.sub(r"(?<=\s)/\S*?/(?=(bench|docs)/)", "", cmd.replace(str(REPO) + "/", ""))
    return re.sub(r"(--(json|out)) \S+", rf"\1 bench/results/{name}.json", cmd)


def reproduce(r: Result, name: str) -> Lines:
    m = r.get("machine") or {
        "cpus": r.get("cpus"),
        "loadavg_at_start": [r.get("loadavg_1m_at_start")],
    }
    where = (
        r.get("device")
        or f"{m.get('cpus')} CPUs, load average {m['loadavg_at_start'][0]} at the start"
    )
    cmd, note = command(r, name), ""
    for recorded, (cmd_as_run, how) in MERGED.items():
        if (r.get("command") or "").startswith(recorded):
            cmd, note = cmd_as_run, f" {how}"
    return ["```bash", cmd, "```", "", f"<sub>Measured on {where}.{note}</sub>", ""]


def missing(name: str, cmd: str = "") -> Lines:
    """Said where a result file is missing; `cmd` defaults to bench/bench_<name>.py's."""
    cmd = cmd or f"python bench/bench_{name}.py --json bench/results/{name}.json"
    return [f"*No result file `bench/results/{name}.json` yet: run `{cmd}`.*", ""]


def plot_ref(name: str, title: str) -> str:
    return f"![{title}](perf/{name}.png)"


def closing(r: Result, name: str, title: str) -> Lines:
    """How a section ends: its plot, then the command and the machine."""
    return [plot_ref(name, title), "", *reproduce(r, name)]
