"""Claims no kernel vouched for never aim the sidecar at a healthy verified rank.

Real sidecar processes; real client processes speaking raw gRPC
(tests/workers/scripted.py) whose reports follow a control file, each
recording every signal it is sent. Verified ranks take an identity ticket
from the sidecar (the kernel names their pid); the liars are a TCP client
with the token and no proof of pid, as in the red team's attack.

- Replicas: four verified ranks of one job in two replica groups, all
  stepping; a liar adds a session claiming replica ``train_1`` with a frozen
  step, not inside torchft, and one claiming a third replica waiting in
  torchft's quorum. 0 signals to the verified ranks, under patience 0 and
  under the shipped patience; then a real hang in ``train_1`` evicts
  ``train_1`` alone.
- Start-up: a liar claims to wait inside ``init_process_group`` (phase
  ``rendezvous``), or fills the seat of a rank not yet connected, so that a
  healthy verified rank still before its process group looks late: never
  named, never signalled.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import PYTHON, SidecarProcess, child_env, free_port, short_tmpdir, wait_for
from trainprobe.proto import PROTOCOL_VERSION

SCRIPTED = Path(__file__).parent / "workers" / "scripted.py"
TOKEN = "claim-trust-token"
pytestmark = pytest.mark.timeout(180)
#: Act at the verdict: a kill or an eviction waits for no patience.
PATIENCE_0 = ["--hang-patience-s", "0", "--replica-patience-s", "0"]


class Client:
    """One scripted client process; :meth:`set` rewrites what its reports say."""

    def __init__(
        self, workdir: Path, target: str, name: str, hello: dict[str, Any], ticket: bool, **ctl: Any
    ) -> None:
        self.name = name
        self.ctl = workdir / f"{name}.json"
        self.record = workdir / f"{name}.signals"
        self.out = workdir / f"{name}.out"
        self.set(**ctl)
        fields = {
            "protocol_version": PROTOCOL_VERSION,
            "hook_version": "scripted",
            "local_rank": hello["rank"],
            "host": os.uname().nodename,
            "pid": "self",
            "interval_ms": 100,
            **hello,
        }
        cmd = [PYTHON, str(SCRIPTED), target, json.dumps(fields), str(self.ctl)]
        cmd += ["--record", str(self.record)]
        cmd += ["--ticket"] if ticket else ["--token", TOKEN]
        with open(self.out, "wb") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=child_env())
        wait_for(lambda: "ticket" in self.output(), 30, what=f"{name} to connect")

    def set(self, **ctl: Any) -> None:
        tmp = self.ctl.with_suffix(".tmp")
        tmp.write_text(json.dumps(ctl))
        tmp.replace(self.ctl)  # never half a file

    def output(self) -> str:
        return self.out.read_text(errors="replace") if self.out.exists() else ""

    def signals(self) -> list[str]:
        lines = self.record.read_text().split() if self.record.exists() else []
        return [s for s in lines if s != "ready"]

    def assert_untouched(self) -> None:
        assert self.signals() == [], f"{self.name} was signalled: {self.signals()}"
        assert self.proc.poll() is None, f"{self.name} is gone"
        stat = Path(f"/proc/{self.proc.pid}/stat").read_text()
        assert stat[stat.rfind(")") + 2] not in "TtZX", f"{self.name} is stopped or dead"

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)


@pytest.fixture
def clients() -> Iterator[list[Client]]:
    made: list[Client] = []
    yield made
    for c in made:
        c.close()


def tcp_sidecar(workdir: Path, *flags: str) -> tuple[SidecarProcess, str]:
    port = free_port()
    listen = ["--listen", f"tcp://127.0.0.1:{port}", "--token", TOKEN]
    return SidecarProcess(workdir, *listen, *flags).start(), f"127.0.0.1:{port}"


def names_of(sc: SidecarProcess, job: str) -> set[int]:
    """Every rank an incident of ``job`` named, as culprit or target."""
    out: set[int] = set()
    for r in sc.incidents():
        if r.get("job_id") == job:
            out |= set((r.get("diagnosis") or {}).get("culprits") or []) | set(
                r.get("targets") or []
            )
    return out


# -- replicas -------------------------------------------------------------------------------


def replica_hello(rank: int, replica: str, group_rank: int, world: int) -> dict[str, Any]:
    return {
        "job_id": "ftjob",
        "rank": rank,
        "world_size": world,
        "replica": {"replica_id": replica, "group_rank": group_rank, "group_world_size": 2},
    }


def stall(ranks: list[Client]) -> None:
    """train_1's rank 2 stops stepping outside torchft, rank 3 waits for it in the
    replicated allreduce, train_0 waits in the quorum."""
    ranks[2].set(mode="freeze")
    ranks[3].set(mode="freeze", wait="allreduce", inflight=True)
    for c in ranks[:2]:
        c.set(mode="freeze", wait="quorum")


@pytest.mark.parametrize(
    ("patience", "watch_s"), [(PATIENCE_0, 5.0), ([], 9.0)], ids=["0", "shipped"]
)
def test_unverified_replica_claims_never_evict_healthy_verified_replicas(
    clients: list[Client], patience: list[str], watch_s: float
) -> None:
    work = short_tmpdir("claims-")
    sc, tcp = tcp_sidecar(work, "--kill-grace-s", "0.5", *patience)
    try:
        ranks = [
            Client(work, sc.target, f"rank{r}", replica_hello(r, f"train_{r // 2}", r % 2, 4), True)
            for r in range(4)
        ]
        clients += ranks
        # Past the stall threshold's warm-up (20 steps): a calibrated 3 s threshold.
        wait_for(lambda: all(w.step >= 25 for w in sc.status("ftjob").workers), 60, 0.2)
        assert all(w.verified for w in sc.status("ftjob").workers)
        frozen = Client(
            work, tcp, "frozen", replica_hello(4, "train_1", 2, 6), False, mode="freeze", step=5
        )
        waiter = Client(
            work, tcp, "waiter", replica_hello(5, "train_2", 0, 6), False,
            mode="freeze", step=5, wait="quorum",
        )  # fmt: skip
        clients += [frozen, waiter]
        # The red team saw SIGTERMs 4.6 s (patience 0) and 10.4 s (shipped) after the claims.
        wait_for(lambda: sc.incidents(), 30, 0.2, "the liars' stall to be judged")
        time.sleep(watch_s)
        for c in ranks:
            c.assert_untouched()
        assert not names_of(sc, "ftjob") & {0, 1, 2, 3}, sc.incidents()
        if not patience:
            # A healthy 6 s stall of train_1, within the shipped replicated patience (10 s):
            # the liars' open episode must not make it count from their onset.
            stall(ranks)
            time.sleep(6.0)
            for c in ranks:
                c.set(mode="step")
            time.sleep(2.0)
            for c in ranks:
                c.assert_untouched()
        # A real hang in train_1.
        stall(ranks)
        evicted = wait_for(
            lambda: [
                a["evicted_replicas"]
                for a in sc.incidents("action")
                if a.get("action") == "evict" and a.get("outcomes")
            ],
            60,
            0.2,
            "train_1 evicted",
        )
        assert evicted == [["train_1"]]
        time.sleep(2.0)
        for c in ranks[:2]:
            c.assert_untouched()
        assert "SIGTERM" in ranks[2].signals() and "SIGTERM" in ranks[3].signals()
    except BaseException:
        print(sc.log_text()[-6000:])
        raise
    finally:
        sc.stop()


# -- start-up ------------------------------------------------------------------------------


def startup_hello(rank: int, world: int) -> dict[str, Any]:
    return {"job_id": "startjob", "rank": rank, "world_size": world}


#: Start-up verdicts 2 s after the last arrival, and acted on at once.
FAST_START = ["--init-straggler-s", "2", "--hang-patience-s", "0", "--kill-grace-s", "0.5"]
BEFORE_INIT = {"mode": "freeze", "phases": ["init"]}
ARRIVED = {"mode": "freeze", "phases": ["init", "rendezvous"], "phase_age_s": 60}


def test_a_claim_to_wait_in_the_rendezvous_never_makes_a_healthy_rank_late(
    clients: list[Client],
) -> None:
    work = short_tmpdir("claims-")
    sc, tcp = tcp_sidecar(work, *FAST_START)
    try:
        # A healthy verified rank 0 still loads its data before init_process_group; a
        # TCP client claims rank 1, "inside init_process_group" for a minute already.
        healthy = Client(work, sc.target, "rank0", startup_hello(0, 2), True, **BEFORE_INIT)
        liar = Client(work, tcp, "liar", startup_hello(1, 2), False, **ARRIVED)
        clients += [healthy, liar]
        wait_for(lambda: len(sc.status("startjob").workers) == 2, 30, 0.2)
        time.sleep(8.0)  # init_straggler_s 2 s, patience 0: a kill would be in by now
        healthy.assert_untouched()
        assert 0 not in names_of(sc, "startjob"), sc.incidents()
        # The control: the real rank 1 (verified) takes its seat and arrives; now
        # rank 0 is the one its peer waits for, and the rule names and kills it.
        real = Client(work, sc.target, "rank1", startup_hello(1, 2), True, **ARRIVED)
        clients.append(real)
        wait_for(lambda: "SIGTERM" in healthy.signals(), 30, 0.2, "rank 0 named and killed")
        assert 0 in names_of(sc, "startjob") and real.signals() == []
    except BaseException:
        print(sc.log_text()[-6000:])
        raise
    finally:
        sc.stop()


def test_a_session_that_fills_the_world_never_makes_a_healthy_rank_look_late(
    clients: list[Client],
) -> None:
    work = short_tmpdir("claims-")
    sc, tcp = tcp_sidecar(work, *FAST_START)
    try:
        # World 3: verified rank 0 waits inside init_process_group, verified rank 1 is
        # still before it, rank 2 has not connected (it may be the one they wait for).
        # A TCP client takes rank 2's seat so that the world looks whole.
        arrived = Client(work, sc.target, "rank0", startup_hello(0, 3), True, **ARRIVED)
        healthy = Client(work, sc.target, "rank1", startup_hello(1, 3), True, **BEFORE_INIT)
        liar = Client(work, tcp, "liar", startup_hello(2, 3), False, **BEFORE_INIT)
        clients += [arrived, healthy, liar]
        wait_for(lambda: len(sc.status("startjob").workers) == 3, 30, 0.2)
        # The liar itself is judged on its own word (before init while a peer waits).
        wait_for(lambda: 2 in names_of(sc, "startjob"), 30, 0.2, "the liar named")
        time.sleep(6.0)
        healthy.assert_untouched()
        arrived.assert_untouched()
        assert not names_of(sc, "startjob") & {0, 1}, sc.incidents()
    except BaseException:
        print(sc.log_text()[-6000:])
        raise
    finally:
        sc.stop()
