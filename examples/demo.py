"""trainprobe demo: a 4-rank DDP job on CPU (gloo) where one rank hangs.

    python examples/demo.py [--hang-rank 2] [--hang-at 40] [--stall-timeout-s 5]
                            [--hang-patience-s 10]

Starts a sidecar, trains a small DDP model with 4 gloo ranks that each use
LivenessProbeHook, makes one rank sleep inside a step (its peers then block
in the gradient allreduce, as in a real NCCL hang), and shows the sidecar
detect the hang and kill the job's processes. Prints the incident and how long
detection took. Nothing to set up: everything runs on this machine.

On a terminal the ranks are shown live as ``trainprobe top`` shows them: each
rank's recent arrival lag as coloured cells, so the hanging rank turns red
(and is marked CULPRIT) before the kill; elsewhere (a log, CI) the status
table is printed every second instead.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc
from rich.console import Console
from rich.live import Live

from trainprobe.proto import probe_pb2_grpc
from trainprobe.sidecar.cli.ctl import format_status
from trainprobe.sidecar.cli.incidents.story import culprit_line
from trainprobe.sidecar.cli.top.live import fetcher
from trainprobe.sidecar.cli.top.view import TopModel, render
from trainprobe.sidecar.core.text import printable

HERE = Path(__file__).resolve().parent


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--hang-rank", type=int, default=2)
    p.add_argument("--hang-at", type=int, default=40)
    p.add_argument("--stall-timeout-s", type=float, default=5.0)
    # A sleeping rank is ambiguous evidence (it may wake up): the sidecar names it
    # at once and kills it after the patience (the shipped default is auto, >= 90 s).
    p.add_argument("--hang-patience-s", type=float, default=10.0)
    args = p.parse_args()

    work = Path(tempfile.mkdtemp(prefix="trainprobe-demo-", dir="/tmp"))
    sock, incidents = work / "sidecar.sock", work / "incidents.jsonl"
    env = dict(os.environ, OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo", PYTHONUNBUFFERED="1")
    print(f"== trainprobe demo (files in {work})")
    print(f"== starting the sidecar on unix://{sock}, stall timeout {args.stall_timeout_s:g} s")
    sidecar = _spawn(
        [
            sys.executable,
            "-m",
            "trainprobe.sidecar",
            "--listen",
            f"unix://{sock}",
            "--state-dir",
            str(work),
            "--stall-timeout-s",
            str(args.stall_timeout_s),
            "--hang-patience-s",
            str(args.hang_patience_s),
            "--log-level",
            "warning",
        ],
        env,
        work / "sidecar.log",
    )
    while not sock.exists():
        time.sleep(0.05)
    port = 29500 + os.getpid() % 1000
    print(
        f"== launching {args.ranks} gloo ranks; rank {args.hang_rank} will hang at step "
        f"{args.hang_at}"
    )
    workers = [
        _spawn(
            [
                sys.executable,
                str(HERE / "ddp_train.py"),
                "--steps",
                "100000",
                "--step-s",
                "0.05",
                "--hang-rank",
                str(args.hang_rank),
                "--hang-at",
                str(args.hang_at),
                "--progress",
                str(work / "progress.jsonl"),
            ],
            dict(
                env,
                RANK=str(r),
                WORLD_SIZE=str(args.ranks),
                LOCAL_RANK=str(r),
                MASTER_ADDR="127.0.0.1",
                MASTER_PORT=str(port),
                TRAINPROBE_JOB_ID="demo",
                TRAINPROBE_TARGET=f"unix://{sock}",
            ),
            work / f"rank{r}.log",
        )
        for r in range(args.ranks)
    ]
    hang_t = None
    incident = None
    console = Console()
    live = Live(console=console, auto_refresh=False) if console.is_terminal else None
    try:
        with grpc.insecure_channel(f"unix://{sock}") as channel, live or contextlib.nullcontext():
            stub = probe_pb2_grpc.SidecarStub(channel)
            fetch = fetcher(stub, (), "demo", 5.0)
            model = TopModel()
            deadline = time.monotonic() + 120
            say = console.print if live else print
            while time.monotonic() < deadline:
                time.sleep(0.5 if live else 1.0)
                reply, diagnoses = fetch()
                if live:
                    model.update(reply, diagnoses, time.monotonic())
                    width, height = console.size
                    view = render(model, "lag", "trainprobe demo", width=width, height=height)
                    live.update(view, refresh=True)
                else:
                    print("\n" + format_status(reply), flush=True)
                for line in _lines(work / "progress.jsonl"):
                    if line.get("event") == "hang" and hang_t is None:
                        hang_t = line["t"]
                        say(
                            f"\n!! rank {line['rank']} (pid {line['pid']}) hangs inside step "
                            f"{line['step']}; its peers now wait in the allreduce"
                        )
                first = incident is None
                incident = next((r for r in _lines(incidents) if r.get("type") == "incident"), None)
                if first and incident is not None:
                    for line in incident_lines(incident):
                        say(line, **({"markup": False, "highlight": False} if live else {}))
                if incident and all(w.poll() is not None for w in workers):
                    break
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
        sidecar.terminate()
        sidecar.wait(10)
    if incident is None:
        print("no incident was recorded: something is wrong, see", work)
        return 1
    actions = [r for r in _lines(incidents) if r.get("type") == "action"]
    print(f"\n== incident (the full record is in the sidecar's incident log {incidents})")
    for line in incident_lines(incident):
        print(line)
    for action in actions:
        for rank, out in sorted(action.get("outcomes", {}).items()):
            print(
                f"   {action['action']} rank {rank}: pid {out.get('pid')} "
                f"{' -> '.join(out.get('signals', []))}, exited={out.get('exited')} "
                f"in {out.get('seconds')} s {out.get('error', '')}"
            )
    took = incident["time"] - hang_t if hang_t else incident["detection_latency_s"]
    print(
        f"\n== detected {incident['verdict']} ({incident['rule']}) {took:.2f} s after the hang "
        f"began (stall timeout {args.stall_timeout_s:g} s); action: {incident['action']}, "
        f"ranks {incident['targets']}"
    )
    print("   the NCCL watchdog would have waited 600 s; gloo's default timeout is 1800 s")
    _trace_summary(work / "traces.otlp.jsonl")
    return 0


def incident_lines(incident: dict) -> list[str]:
    """The incident as the demo prints it: its verdict, the culprit line, the diagnosis."""
    keys = ("verdict", "rule", "culprits", "waiting", "action", "targets")
    out = [f"!! incident {incident.get('id')}: " + json.dumps({k: incident.get(k) for k in keys})]
    if line := culprit_line(incident):
        out.append(f"   {line}")
    diagnosis = incident.get("diagnosis") or {}
    if diagnosis:
        out.append(printable(f"   diagnosis ({diagnosis.get('kind')}): {diagnosis.get('summary')}"))
    return out


def _trace_summary(path: Path) -> None:
    """What the sidecar traced, from its OTLP-JSON file (docs/OBSERVABILITY.md)."""
    spans = [
        span
        for line in _lines(path)
        for rs in line.get("resourceSpans", [])
        for ss in rs.get("scopeSpans", [])
        for span in ss.get("spans", [])
    ]
    if not spans:
        return
    names: dict[str, int] = {}
    for span in spans:
        names[span["name"]] = names.get(span["name"], 0) + 1
    print(f"\n== traces: {len(spans)} spans in {path}: {names}")
    for span in spans:
        if span["name"].startswith("incident"):
            print(
                f"   {span['name']}: trace {span['traceId']}, "
                f"{len(span.get('links', []))} links (each rank's last step and the one "
                "that never ended)"
            )


def _spawn(cmd: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        return subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)


def _lines(path: Path) -> list[dict]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        with contextlib.suppress(json.JSONDecodeError):
            out.append(json.loads(line))
    return out


if __name__ == "__main__":
    sys.exit(main())
