"""The real servers of the tools we compare against, for the cost benchmark.

- NVRx (nvidia-resiliency-ext 0.4.1): a ``RankMonitorServer`` in its own
  process, started with its own ``run_in_subprocess``, and a
  ``RankMonitorClient`` connected to it, exactly as ``ft_launcher`` wires them.
- torchelastic: a ``FileTimerServer`` in its own process (where the elastic
  agent would run it) and a ``FileTimerClient`` configured for ``expires()``.

Nothing here reimplements either tool; it only starts and stops them.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import time
from pathlib import Path
from typing import Any


class NvrxMonitor:
    """A real NVRx RankMonitorServer process plus a connected client."""

    def __init__(self, workdir: Path) -> None:
        self.socket_path = str(workdir / "nvrx_rmon.sock")
        self.process: Any = None
        self.client: Any = None

    def start(self) -> NvrxMonitor:
        from nvidia_resiliency_ext.fault_tolerance import (
            FaultToleranceConfig,
            RankMonitorClient,
            RankMonitorServer,
        )

        # One rank, as ft_launcher would describe it to the client.
        os.environ.setdefault("RANK", "0")
        os.environ.setdefault("LOCAL_RANK", "0")
        os.environ.setdefault("WORLD_SIZE", "1")
        cfg = FaultToleranceConfig(log_level=logging.WARNING)  # defaults: nothing times out
        self.process = RankMonitorServer.run_in_subprocess(
            cfg, self.socket_path, mp_ctx=mp.get_context("spawn")
        )
        os.environ["FT_RANK_MONITOR_IPC_SOCKET"] = self.socket_path
        self.client = RankMonitorClient()
        self.client.init_workload_monitoring()
        return self

    def stop(self) -> None:
        if self.client is not None:
            self.client.shutdown_workload_monitoring()
        if self.process is not None:
            self.process.terminate()
            self.process.join(10)


def _run_timer_server(path: str, ready: Any, stop: Any) -> None:
    from torch.distributed.elastic.timer import FileTimerServer

    server = FileTimerServer(path, run_id="bench", max_interval=1.0)
    server.start()
    ready.set()
    stop.wait()
    server.stop()


class ElasticTimerServer:
    """A real torchelastic FileTimerServer in its own process."""

    def __init__(self, workdir: Path) -> None:
        self.path = str(workdir / "elastic_timer.fifo")
        ctx = mp.get_context("spawn")
        self._ready = ctx.Event()
        self._stop = ctx.Event()
        self.process = ctx.Process(
            target=_run_timer_server, args=(self.path, self._ready, self._stop), daemon=True
        )

    def start(self) -> ElasticTimerServer:
        from torch.distributed.elastic.timer import FileTimerClient, configure

        self.process.start()
        if not self._ready.wait(60):
            raise RuntimeError("FileTimerServer did not start")
        deadline = time.monotonic() + 10
        while not Path(self.path).exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        # SIGKILL is FileTimerClient's default: what a lapsed timer would send.
        configure(FileTimerClient(self.path))
        return self

    def stop(self) -> None:
        self._stop.set()
        self.process.join(15)
        if self.process.is_alive():
            self.process.kill()
