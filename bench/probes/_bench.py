"""Puts bench/ on sys.path: a probe imports the harness the headline benchmarks
share (``harness.common``, ``harness.loadgen``, ...) from there, not a copy."""

from __future__ import annotations

import sys
from pathlib import Path

__all__ = ["BENCH"]

BENCH = Path(__file__).resolve().parents[1]
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))
