"""Host cost of the CUDA event, stream and NVML calls the hook makes (GPU only).

Best of 5 repeats of 2000 calls each (200 for NVML), in microseconds. It
explains the CUDA variant of the comm hook: ``torch.cuda.Event.record()``
without a stream builds a ``torch.cuda.Stream`` for the current stream on
every call, so the hook records on cached stream objects instead
(``EventPool.record``).

    python bench/probes/bench_cuda_event_costs.py [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import sys
import timeit
from collections.abc import Callable
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / d) for d in ("proto", "hooks")]

from trainprobe.hooks.watch.cuda_events import EventPool  # noqa: E402


def best_us(fn: Callable[[], object], number: int) -> float:
    best = min(timeit.repeat(fn, number=number, repeat=5)) / number * 1e6
    torch.cuda.synchronize()
    return round(best, 3)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json", default="")
    args = p.parse_args()
    torch.cuda.set_device(0)
    torch.cuda.init()
    ev, ev2 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ev.record()
    ev2.record()
    untimed = torch.cuda.Event()
    untimed.record()
    stream = torch.cuda.current_stream()
    pool = EventPool(0)
    calls: dict[str, Callable[[], object]] = {
        "torch.cuda.current_stream()": torch.cuda.current_stream,
        "torch.cuda.current_device()": torch.cuda.current_device,
        "Event.record() (current stream)": ev.record,
        "Event.record(stream)": lambda: ev.record(stream),
        "EventPool.record(event) (cached stream)": lambda: pool.record(ev),
        "untimed Event.record(stream)": lambda: untimed.record(stream),
        "Event(enable_timing=True)": lambda: torch.cuda.Event(enable_timing=True),
        "new Event + first record(stream)": lambda: torch.cuda.Event(enable_timing=True).record(
            stream
        ),
        "EventPool.take() + give()": lambda: pool.give(*pool.take()[:2]),
        "Event.query()": ev.query,
        "Event.elapsed_time()": lambda: ev.elapsed_time(ev2),
        "torch.cuda.memory_stats(0)": lambda: torch.cuda.memory_stats(0),
        "get_device_properties(0).uuid": lambda: str(torch.cuda.get_device_properties(0).uuid),
    }
    out = {name: best_us(fn, 2000) for name, fn in calls.items()}
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        out["nvmlDeviceGetMemoryInfo"] = best_us(
            lambda: pynvml.nvmlDeviceGetMemoryInfo(handle), 200
        )
        out["nvmlDeviceGetComputeRunningProcesses"] = best_us(
            lambda: pynvml.nvmlDeviceGetComputeRunningProcesses(handle), 200
        )
    except Exception as err:
        out["nvml_error"] = repr(err)  # type: ignore[assignment]
    print(json.dumps(out, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
