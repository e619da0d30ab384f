"""Regenerate the committed protobuf/gRPC code (run through `make proto`).

Usage: python tools/gen_proto.py [OUT_DIR]

OUT_DIR defaults to proto/, so the files land next to the .proto in
proto/trainprobe/proto/. tests/test_proto_fresh.py generates into a temporary
directory and compares, so committed code can never go stale.
"""

from __future__ import annotations

import sys
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "proto"
SOURCES = ["trainprobe/proto/probe.proto"]


def generate(out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    args = [
        "protoc",
        f"-I{PROTO_ROOT}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        *SOURCES,
    ]
    rc = protoc.main(args)
    if rc != 0:
        raise SystemExit(f"protoc failed with exit code {rc}")


if __name__ == "__main__":
    generate(Path(sys.argv[1]) if len(sys.argv) > 1 else PROTO_ROOT)
