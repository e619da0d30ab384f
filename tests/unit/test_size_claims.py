"""Every install size the docs state is the one bench/bench_install.py measured.

Building venvs takes minutes, so this test does not measure: it compares the
docs' numbers with the committed measurement (bench/results/install.json),
and checks that the measurement is of today's requirements. A new base
dependency, or a changed ``ray`` extra, fails here until the benchmark is run
again (``python bench/bench_install.py --no-torch --json
bench/results/install.json``, about a minute with pip's cache warm) and the
docs take its figures.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

from bench_install import BASE, RAY, measured_requirements  # noqa: E402

RESULT = ROOT / "bench" / "results" / "install.json"
SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*(MiB|MB|GiB|GB)\b")
TO_MIB = {"MiB": 1.0, "GiB": 1024.0, "MB": 1e6 / 2**20, "GB": 1e9 / 2**20}


def measured() -> dict[str, float]:
    sizes = json.loads(RESULT.read_text())["sizes"]
    return {
        "base, net of pip": sizes[BASE]["net_of_empty_venv_mib"],
        "base, site-packages": sizes[BASE]["site_packages_mib"],
        "ray, net of pip": sizes[RAY]["net_of_empty_venv_mib"],
        "ray, site-packages": sizes[RAY]["site_packages_mib"],
    }


def section(text: str, heading: str) -> str:
    """The text under a markdown heading, up to the next heading of its level."""
    start = text.index(heading + "\n")
    level = heading.split(" ")[0]
    end = text.find(f"\n{level} ", start + len(heading))
    return text[start : end if end >= 0 else len(text)]


def claims() -> dict[str, str]:
    """Where the docs state install sizes: the README's and DEPLOY's Install
    sections, and the sidecar image's header comment."""
    docker = (ROOT / "deploy" / "sidecar.Dockerfile").read_text()
    return {
        "README.md": section((ROOT / "README.md").read_text(), "## Install"),
        "docs/DEPLOY.md": section((ROOT / "docs" / "DEPLOY.md").read_text(), "## Install"),
        "deploy/sidecar.Dockerfile": "\n".join(
            line for line in docker.splitlines() if line.startswith("#")
        ),
    }


def test_the_measurement_is_of_todays_requirements() -> None:
    recorded = json.loads(RESULT.read_text())["requirements"]
    assert recorded == measured_requirements(), (
        "pyproject.toml's dependencies or its ray extra changed since the install sizes were "
        "measured: run `python bench/bench_install.py --no-torch --json "
        "bench/results/install.json` and update the sizes in README.md, docs/DEPLOY.md and "
        "deploy/sidecar.Dockerfile"
    )


@pytest.mark.parametrize("where", sorted(claims()))
def test_every_size_stated_is_a_measured_one(where: str) -> None:
    figures = measured()
    stated = [
        (m.group(0), float(m.group(1)), m.group(1), m.group(2))
        for m in SIZE.finditer(claims()[where])
    ]
    # The sidecar-only size is the figure every one of these places must give.
    assert stated, f"{where} states no install size any more"
    for text, value, digits, unit in stated:
        decimals = len(digits.partition(".")[2])
        tolerance = 0.5 * 10**-decimals * TO_MIB[unit] + 1e-9
        close = [k for k, v in figures.items() if abs(value * TO_MIB[unit] - v) <= tolerance]
        assert close, f"{where} says {text!r}; bench/results/install.json measured {figures}"
    assert any(
        abs(value * TO_MIB[unit] - figures["base, net of pip"]) <= 0.05 * TO_MIB[unit]
        for _, value, _, unit in stated
    ), f"{where} does not give the sidecar-only size, {figures['base, net of pip']} MiB"
