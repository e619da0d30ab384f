"""Run every benchmark under bench/ and print their tables (``make bench``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCHES = [
    ["bench_hook.py"],
    ["bench_detection.py", "--trials", "5", "--mode", "sleep"],
    ["bench_detection.py", "--trials", "5", "--mode", "stop"],
    ["bench_sidecar_otel.py", "--rounds", "7"],
    ["bench_sidecar_otel.py", "--encoder"],
]


def main() -> int:
    failed = 0
    for argv in BENCHES:
        print(f"\n### python bench/{' '.join(argv)}", flush=True)
        failed += subprocess.run([sys.executable, str(HERE / argv[0]), *argv[1:]]).returncode != 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
