"""The README's install from a wheel, in a clean venv: a sidecar with neither
torch nor Ray.

A real install of this checkout's wheel, its dependencies from PyPI (network
needed: the test skips without it), into a fresh venv, with no PYTHONPATH to
the checkout. Its ``trainprobe-sidecar`` then judges and kills a hung worker,
whose hook runs from the test's own venv (as a training container's would),
and the commands that need an extra it lacks say how to install it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import PYTHON, REPO, child_env, short_tmpdir, wait_for
from trainprobe.sidecar.act.incident_log import read_incident_log

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

WORKER = REPO / "tests" / "workers" / "hang_after.py"
#: What the wheel is built from (the same list as deploy/sidecar.Dockerfile).
SOURCES = ("pyproject.toml", "README.md", "LICENSE", "proto", "hooks", "sidecar")


def build_wheel(out: Path) -> Path:
    # Built from a copy: an in-tree build would leave build/ in the checkout.
    src = out / "src"
    src.mkdir()
    for name in SOURCES:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(REPO / name, src / name)
    subprocess.run(
        [PYTHON, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(src)],
        check=True,
        timeout=300,
    )
    (wheel,) = out.glob("trainprobe-*.whl")
    return wheel


def clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env["PATH"] = "/usr/bin:/bin"
    return env


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_sidecar_only_install_judges_a_worker_without_torch_or_ray() -> None:
    work = short_tmpdir("tp-inst-")
    wheel = build_wheel(work)
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    vpy = str(venv / "bin" / "python")
    install = subprocess.run(
        [vpy, "-m", "pip", "install", "-q", str(wheel)],
        capture_output=True,
        text=True,
        timeout=600,
        env=clean_env(),
    )
    if install.returncode and "No matching distribution" in install.stderr + install.stdout:
        pytest.skip(f"no package index reachable: {install.stderr.strip()[-200:]}")
    assert install.returncode == 0, install.stderr
    found = subprocess.run(
        [
            vpy,
            "-c",
            "import importlib.util as u; print([m for m in ('torch', 'ray') if u.find_spec(m)])",
        ],
        capture_output=True,
        text=True,
        env=clean_env(),
    )
    assert found.stdout.strip() == "[]", "torch or ray came with the base install"
    assert (
        "py-spy"
        in subprocess.run(
            [vpy, "-m", "pip", "list"], capture_output=True, text=True, env=clean_env()
        ).stdout
    )
    listed = subprocess.run(
        [str(venv / "bin" / "trainprobe-sidecar"), "--list-settings"],
        capture_output=True,
        text=True,
        env=clean_env(),
    )
    assert listed.returncode == 0 and "`stall_timeout_s`" in listed.stdout

    sock, state = work / "s.sock", work / "state"
    with open(work / "sidecar.log", "wb") as log:
        sidecar = subprocess.Popen(
            [
                str(venv / "bin" / "trainprobe-sidecar"),
                "--listen",
                f"unix://{sock}",
                "--state-dir",
                str(state),
                "--stall-timeout-s",
                "2",
                "--hang-patience-s",
                "0",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=clean_env(),
            cwd=work,
        )
    worker = None
    try:
        wait_for(lambda: "ready on" in (work / "sidecar.log").read_text(), 60, what="sidecar")
        worker = subprocess.Popen(
            [PYTHON, str(WORKER), "clean-venv", "30"],
            env=child_env(TRAINPROBE_TARGET=f"unix://{sock}"),
            stdout=subprocess.PIPE,
            text=True,
        )
        assert worker.stdout.readline().startswith("hang")
        log_path = state / "incidents.jsonl"

        def killed() -> list[dict]:
            rows = read_incident_log(log_path) if log_path.exists() else []
            return [r for r in rows if r.get("type") == "action" and r.get("action") == "kill"]

        (action,) = wait_for(killed, 60, what="the kill")
        assert action["ok"] and action["outcomes"]["0"]["pid"] == worker.pid
        assert worker.wait(10) != 0
        status = subprocess.run(
            [str(venv / "bin" / "trainprobe"), "status", "--target", f"unix://{sock}"],
            capture_output=True,
            text=True,
            env=clean_env(),
        )
        assert status.returncode == 0 and "clean-venv" in status.stdout
        # A missing extra is named with a command that works: there is no
        # trainprobe on PyPI, so `pip install 'trainprobe[report]'` would fail.
        extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
            "optional-dependencies"
        ]
        for argv, extra in (
            (["report", "--job", "x", "--watch-s", "0"], "report"),
            (["run", "--", "true"], "torchft"),
        ):
            r = subprocess.run(
                [str(venv / "bin" / "trainprobe"), *argv],
                capture_output=True,
                text=True,
                env=clean_env(),
                cwd=work,
                timeout=60,
            )
            assert r.returncode != 0, r.stdout
            assert f"pip install '{extras[extra][0]}'" in r.stderr, r.stderr
            assert "trainprobe[" not in r.stderr, r.stderr
    finally:
        if worker is not None:
            worker.kill()
            worker.wait()
        sidecar.terminate()
        sidecar.wait(30)
        print((work / "sidecar.log").read_text()[-3000:])
