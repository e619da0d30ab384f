"""Job names: the user's, else the script and a tag every rank shares."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from trainprobe.hooks.report.job_name import MAX_NAME_CHARS, job_name

ENV = (
    "TRAINPROBE_JOB_NAME",
    "TRAINPROBE_JOB_ID",
    "TORCHELASTIC_RUN_ID",
    "SLURM_JOB_ID",
    "MASTER_ADDR",
    "MASTER_PORT",
)


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(sys, "argv", ["/jobs/train.py", "--lr", "1"])


def test_the_users_name_wins_then_a_named_id(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "my-run")
    assert job_name("resnet-sweep-3") == "resnet-sweep-3"
    monkeypatch.setenv("TRAINPROBE_JOB_NAME", "from-env")
    assert job_name() == "from-env"
    monkeypatch.delenv("TRAINPROBE_JOB_NAME")
    assert job_name(job_id="explicit-id") == "explicit-id"
    monkeypatch.setenv("TRAINPROBE_JOB_ID", "env-id")
    assert job_name() == "env-id"


def test_script_and_run_id_ray_or_slurm(monkeypatch: pytest.MonkeyPatch) -> None:
    assert job_name(ray_run_name="TorchTrainer_2026") == "train.py TorchTrainer_2026"
    assert job_name(ray_job_id="02000000") == "train.py ray-02000000"
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "nightly-7")
    assert job_name() == "train.py nightly-7"
    # torchrun --standalone's made-up UUID and "none" are no names.
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "7d02dd26-f985-45e5-a82b-bc7b40f5b5f2")
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    assert job_name() == "train.py slurm-4242"
    monkeypatch.setattr(sys, "argv", ["/site/trainer/__main__.py"])
    assert job_name() == "trainer slurm-4242"


def test_names_are_cleaned_and_bounded() -> None:
    assert job_name("a\x1b[31mb\nc\u00a0d\u2028e") == "a?[31mb?c?d?e"
    assert len(job_name("x" * 500)) == MAX_NAME_CHARS


def test_under_torchrun_the_time_is_the_agents_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "none")
    parent = Path(f"/proc/{os.getppid()}/stat").read_text()
    ticks = int(parent[parent.rindex(")") + 2 :].split()[19])
    stat = Path("/proc/stat").read_text().splitlines()
    btime = next(int(x.split()[1]) for x in stat if x.startswith("btime "))
    started = btime + ticks / os.sysconf("SC_CLK_TCK")
    expected = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started))
    assert job_name() == f"train.py {expected}"


RANK_SCRIPT = """
import os, subprocess, sys, time
from trainprobe.hooks.report.job_name import job_name
if os.environ.get("SPAWNED"):
    print(job_name(), flush=True)
else:
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", "29555"
    time.sleep(1.2)  # the other ranks start later than this one, a second apart
    print(job_name(), flush=True)
    for _ in range(2):
        time.sleep(1.1)
        subprocess.run([sys.executable, *sys.argv], env={**os.environ, "SPAWNED": "1"})
"""


def test_ranks_a_launcher_spawns_share_its_start_time_not_their_own(tmp_path: Path) -> None:
    # Lightning's way: rank 0 sets MASTER_ADDR/PORT and starts the other ranks
    # with its own command line.
    script = tmp_path / "train.py"
    script.write_text(RANK_SCRIPT)
    env = {k: v for k, v in os.environ.items() if k not in ENV}
    out = subprocess.run(
        [sys.executable, str(script), "--lr", "1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    names = out.stdout.split("\n")[:3]
    assert len(names) == 3 and len(set(names)) == 1, (names, out.stderr)
    assert names[0].startswith("train.py 20")


def test_the_sidecar_carries_the_name_and_refuses_one_that_could_forge_a_row() -> None:
    from dataclasses import replace

    from tests.core_builders import hello
    from trainprobe.proto import probe_pb2
    from trainprobe.sidecar.core.session import Registry
    from trainprobe.sidecar.core.session.validate import ValidationError, validate_hello
    from trainprobe.sidecar.transport.pb import hello_from_pb, status_pb

    data = hello_from_pb(
        probe_pb2.Hello(
            protocol_version=1,
            job_id="10.0.0.1:29500",
            job_name="train.py x",
            rank=0,
            world_size=2,
            pid=7,
            interval_ms=1000,
            host="h",
        )
    )
    validate_hello(data, range(1, 2))
    reg = Registry()
    row = status_pb(reg.open(data, 1.0), 2.0, 60.0)
    assert (row.job_id, row.job_name) == ("10.0.0.1:29500", "train.py x")
    for bad in ("a\nb", "a\x1b[2Jb", "x" * 10_000):
        with pytest.raises(ValidationError, match="job_name"):
            validate_hello(replace(hello(), job_name=bad), range(1, 2))
