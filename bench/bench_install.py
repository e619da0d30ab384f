"""Install sizes: the base install (hook and sidecar), with Ray, and torch.

    python bench/bench_install.py [--python python3] [--json bench/results/install.json]
                                  [--no-torch]

Builds this checkout's wheel once, then installs it into fresh venvs (pip's
cache warm or not: the size is the same) and measures ``du -s`` of each venv's
site-packages, minus that of an empty venv (pip itself). The hook and the
sidecar are one distribution, so "hook only" and "sidecar only" are the same
install; the hook's torch is the user's, measured separately for reference
and never part of either figure.

The result also records the requirements it measured (the base dependencies
and the ``ray`` extra, from pyproject.toml): tests/unit/test_size_claims.py
compares every size the docs state with this file, and fails once those
requirements change, until this benchmark is run again.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness.common import REPO, write_result

#: The CPU build installed here; CUDA builds are several times larger.
TORCH_PIN = "torch==2.13.0"
BASE, RAY, TORCH = (
    "base (hook or sidecar, no torch, no ray)",
    "with Ray (trainprobe[ray])",
    "torch alone (the user's, for reference)",
)


def measured_requirements(pyproject: Path = REPO / "pyproject.toml") -> dict[str, list[str]]:
    """What decides the sizes: the base dependencies and the ray extra."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]

    project = tomllib.loads(pyproject.read_text())["project"]
    return {
        "dependencies": sorted(project["dependencies"]),
        "ray": sorted(project["optional-dependencies"]["ray"]),
    }


def site_packages_kib(venv: Path) -> int:
    (site,) = venv.glob("lib/python3*/site-packages")
    out = subprocess.run(["du", "-sk", str(site)], capture_output=True, text=True, check=True)
    return int(out.stdout.split()[0])


def fresh_venv(python: str, where: Path) -> Path:
    subprocess.run([python, "-m", "venv", str(where)], check=True)
    return where


def pip_install(venv: Path, *reqs: str) -> float:
    t0 = time.monotonic()
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", *reqs], check=True)
    return time.monotonic() - t0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--json", "--out", dest="json", default="", help="write the result here")
    p.add_argument(
        "--no-torch", action="store_true", help="skip the torch reference install (minutes)"
    )
    p.add_argument("--quick", action="store_true", help="the same (sizes have no smaller run)")
    args = p.parse_args()
    started = time.monotonic()
    python = subprocess.run(
        [args.python, "-c", "import sys; print(sys.version.split()[0])"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="tp-install-") as tmp:
        work = Path(tmp)
        wheels = work / "wheels"
        subprocess.run(
            [args.python, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(REPO)],
            check=True,
        )
        (wheel,) = wheels.glob("trainprobe-*.whl")
        empty = site_packages_kib(fresh_venv(args.python, work / "empty"))
        sizes: dict[str, dict[str, object]] = {}
        installs = [(BASE, [str(wheel)]), (RAY, [f"trainprobe[ray] @ {wheel.as_uri()}"])]
        if not args.no_torch:
            installs.append((TORCH, [TORCH_PIN]))
        for name, reqs in installs:
            venv = fresh_venv(args.python, work / f"v{len(sizes)}")
            seconds = pip_install(venv, *reqs)
            kib = site_packages_kib(venv)
            has = subprocess.run(
                [
                    str(venv / "bin" / "python"),
                    "-c",
                    "import importlib.util as u; print([m for m in ('torch', 'ray') "
                    "if u.find_spec(m)])",
                ],
                capture_output=True,
                text=True,
            ).stdout.strip()
            sizes[name] = {
                "site_packages_mib": round(kib / 1024, 1),
                "net_of_empty_venv_mib": round((kib - empty) / 1024, 1),
                "install_s": round(seconds, 1),
                "torch_or_ray_present": has,
            }
            print(name, sizes[name], flush=True)
    result = {
        "venv_python": python,
        "requirements": measured_requirements(),
        "empty_venv_mib": round(empty / 1024, 1),
        "sizes": sizes,
    }
    if args.json:
        write_result(args.json, "install", result, started)
    print(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
