"""``trainprobe incidents ID``: an evidence round's lines say what was not read
in words, never as a raw ``None``."""

from __future__ import annotations

from trainprobe.sidecar.cli.incidents.timeline import _evidence


def test_evidence_lines_name_what_was_not_read() -> None:
    lines = _evidence(
        {
            "1": {"label": "sleep", "state": "sleeping", "cpu_ratio": None, "samples": 1},
            "2": {"state": "sleeping", "cpu_ratio": 0.0, "stack_same": True, "samples": 2},
            "3": {"state": "running", "cpu_ratio": 0.97, "stack_same": False, "samples": 2},
        }
    )
    assert lines == [
        "    rank 1: sleep, process sleeping, cpu not read, stack not read, 1 samples",
        "    rank 2: sleeping, process sleeping, cpu 0.0, stack unchanged, 2 samples",
        "    rank 3: running, process running, cpu 0.97, stack moved, 2 samples",
    ]
