"""Install sizes: the base install (hook and sidecar), with Ray, and torch.

    python bench/bench_install.py [--python python3] [--out DIR]

Builds this checkout's wheel once, then installs it into fresh venvs from
PyPI and measures ``du -s`` of each venv's site-packages, minus that of an
empty venv (pip itself). The hook and the sidecar are one distribution, so
"hook only" and "sidecar only" are the same install; the hook's torch is the
user's, measured separately for reference and never part of either figure.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: The CPU build installed here; CUDA builds are several times larger.
TORCH_PIN = "torch==2.13.0"


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
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--out", default="", help="write the result JSON here")
    args = p.parse_args()
    result: dict[str, object] = {
        "command": " ".join(["python", "bench/bench_install.py", *sys.argv[1:]]),
        "python": subprocess.run(
            [args.python, "-c", "import sys; print(sys.version.split()[0])"],
            capture_output=True,
            text=True,
        ).stdout.strip(),
    }
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
        for name, reqs in (
            ("base (hook or sidecar, no torch, no ray)", [str(wheel)]),
            ("with Ray (trainprobe[ray])", [f"trainprobe[ray] @ {wheel.as_uri()}"]),
            ("torch alone (the user's, for reference)", [TORCH_PIN]),
        ):
            venv = fresh_venv(args.python, work / f"v{len(sizes)}")
            seconds = pip_install(venv, *reqs)
            kib = site_packages_kib(venv)
            py = str(venv / "bin" / "python")
            has = subprocess.run(
                [
                    py,
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
        result["empty_venv_mib"] = round(empty / 1024, 1)
        result["sizes"] = sizes
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
