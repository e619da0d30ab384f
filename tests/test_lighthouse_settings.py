"""One source for the torchft lighthouse settings (trainprobe.proto.lighthouse).

``trainprobe run --replicas`` starts its lighthouse with them, Ray Train's
``TorchftConfig`` gets them from ``torchft_config``, and every hand-written
``torchft_lighthouse`` command in the docs and examples must say the same.
"""

from __future__ import annotations

import argparse
import re
import shlex

import pytest

from tests.ray_support import ray_environment
from tests.support import REPO
from trainprobe.proto.lighthouse import (
    HEARTBEAT_TIMEOUT_MS,
    JOIN_TIMEOUT_MS,
    LIGHTHOUSE_DEFAULTS,
    MIN_REPLICAS,
)
from trainprobe.sidecar.cli.run.command import add_run_parser


def test_trainprobe_run_gives_its_lighthouse_the_shared_settings() -> None:
    parser = argparse.ArgumentParser()
    add_run_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["run", "--", "python", "train.py"])
    assert args.heartbeat_timeout_ms == HEARTBEAT_TIMEOUT_MS == 1_000
    assert args.join_timeout_ms == JOIN_TIMEOUT_MS == 10_000
    assert LIGHTHOUSE_DEFAULTS == {
        "min_replicas": MIN_REPLICAS,
        "join_timeout_ms": JOIN_TIMEOUT_MS,
        "heartbeat_timeout_ms": HEARTBEAT_TIMEOUT_MS,
    }


def test_torchft_config_hands_ray_the_same_settings() -> None:
    # Inside the Ray tests' environment: Ray's client reads its auth mode and
    # token once a process, and Ray Train's import reads them. Read here
    # without it, every later Ray test of this process met its own cluster's
    # token with "RAY_AUTH_MODE is disabled" and failed to start.
    with ray_environment():
        pytest.importorskip("ray.train.v2.torch.torchft_config")
        from trainprobe.hooks.ray_train import torchft_config

        assert torchft_config().lighthouse_kwargs == LIGHTHOUSE_DEFAULTS
        mine = torchft_config({"heartbeat_timeout_ms": 5_000}).lighthouse_kwargs
        assert mine == {**LIGHTHOUSE_DEFAULTS, "heartbeat_timeout_ms": 5_000}


def test_every_hand_written_lighthouse_command_says_the_same() -> None:
    files = [REPO / "README.md", *(REPO / "docs").glob("*.md"), *(REPO / "examples").glob("*.py")]
    found = 0
    for path in files:
        for line in path.read_text().splitlines():
            match = re.search(r"torchft_lighthouse( --\S+ \S+)+", line)
            if match is None:
                continue
            words = shlex.split(match.group(0))[1:]
            flags = {k.lstrip("-"): int(v) for k, v in zip(words[::2], words[1::2], strict=True)}
            assert flags == LIGHTHOUSE_DEFAULTS, f"{path.name}: {line.strip()}"
            found += 1
    assert found >= 2  # docs/DEPLOY.md's recipe and examples/torchft_train.py's
