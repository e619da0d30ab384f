"""The kernel's word that a relayed rank is held, from the node that runs it.

A paused job (:func:`~trainprobe.sidecar.core.hang.pause.pause_check`) is
told from a hung one by the kernel: a rank stopped (SIGSTOP), stopped by a
tracer, or frozen by a cgroup freezer. The upstream of a relay cannot read a
relayed rank's ``/proc``; the node sidecar on its host can. Both halves are
here, pure:

- Node side, :class:`HeldWatch`: which of its verified workers to read, and
  what to send up. A worker is read only once its stream has been silent
  for :func:`~trainprobe.sidecar.core.judge.evidence.stale_after_s` of its report
  interval (a held process's reporter is held too, so a reporting worker
  runs), then every :data:`READ_EVERY_S` (the evidence rounds' cadence)
  while it stays silent or held. Sent: each read that finds it held, and
  once a release, when its stream reports after such a read; nothing else.
- Upstream side, :func:`relayed_samples`: the word a session's owning node
  stream gave (:attr:`WorkerState.held`), while it is fresh, as the
  :class:`~trainprobe.sidecar.core.judge.evidence.ProcSample` a ``/proc`` read of a
  local rank gives, so evidence, :func:`pause_check` and
  :func:`~trainprobe.sidecar.core.judge.evidence.definitive_reason` see no
  difference. :func:`awaiting_word` names the relayed ranks whose node's
  word may still be on its way, so that a kill on patience alone waits for it;
  past that, a relayed rank with no word runs (its node read it running), so
  a held rank elsewhere, made up or real, never makes its silent hang a pause.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from trainprobe.sidecar.core.hang.state import ROUND_S
from trainprobe.sidecar.core.judge.evidence import ProcSample, RankEvidence, assess, stale_after_s
from trainprobe.sidecar.core.session.model import WorkerState, heard_every_ms

__all__ = [
    "NODE_READ_WAIT_S",
    "READ_EVERY_S",
    "HeldWatch",
    "awaiting_word",
    "held_fresh_s",
    "held_kind",
    "relayed_evidence",
    "relayed_samples",
]

#: How often the node reads a silent or held worker: the evidence rounds' cadence.
READ_EVERY_S = ROUND_S
#: How long the node's batch loop waits for a read before it sends without it.
NODE_READ_WAIT_S = 0.25
#: How a process can be held, as the node says it, and the /proc state letter
#: each reads as here (a frozen one reads S or D: the freezer's word decides).
_LETTER = {"stopped": "T", "traced": "t", "frozen": "S"}


def held_kind(ev: RankEvidence) -> str:
    """How the kernel holds ``ev``'s process: ``frozen``, ``stopped``, ``traced``, or ""."""
    if ev.frozen:
        return "frozen"
    return ev.state if ev.state in ("stopped", "traced") else ""


def held_fresh_s(relay_interval_ms: int) -> float:
    """How long a node's word stays current: 3 of its refreshes (one read every
    :data:`READ_EVERY_S`, sent with the next batch). An older word is the past:
    the node or its link went quiet, and the rank is unknown again."""
    return 3.0 * max(READ_EVERY_S, relay_interval_ms / 1000.0)


def relayed_samples(w: WorkerState, now: float) -> list[ProcSample]:
    """The owning node's word on relayed ``w`` as one ``/proc`` sample ([] if none).

    Only a live, verified session whose owning Relay stream gave it
    (:attr:`WorkerState.held` is set by that stream alone), and only while fresh.
    """
    word = w.held
    if word is None or not w.connected or w.node is None:
        return []
    how, at = word
    if how not in _LETTER or now - at > held_fresh_s(w.relay_interval_ms):
        return []
    return [ProcSample(at, _LETTER[how], frozen=how == "frozen")]


def relayed_evidence(states: Iterable[WorkerState], now: float) -> dict[int, RankEvidence]:
    """Each live relayed rank of ``states`` as its node's word alone says (no
    stacks): free to read, so a pause is judged on every relayed rank of a job,
    not only on those an evidence round samples."""
    return {
        w.hello.rank: assess(
            w.hello.rank,
            relayed_samples(w, now),
            [],
            now - w.last_report_at <= stale_after_s(heard_every_ms(w)),
        )
        for w in states
        if w.node is not None and w.connected
    }


def awaiting_word(states: Sequence[WorkerState], now: float) -> list[int]:
    """Relayed ranks, silent here, whose node may not have said yet whether they
    are held: the node reads a worker once it is silent 2.5 report intervals
    and sends the read with its next batch (two batch intervals and two read
    waits, at most, after the last report arrived here). Past that, no word
    means the node saw it running (or is gone itself)."""
    return sorted(
        w.hello.rank
        for w in states
        if w.node is not None
        and w.connected
        and not relayed_samples(w, now)
        and stale_after_s(heard_every_ms(w))
        < now - w.last_report_at
        <= stale_after_s(w.hello.interval_ms)
        + 2 * (w.relay_interval_ms / 1000.0 + NODE_READ_WAIT_S)
    )


@dataclass(slots=True)
class _Watched:
    interval_ms: int
    heard_at: float
    read_at: float = float("-inf")
    how: str = ""
    seen_at: float = 0.0
    #: An update not sent yet (a held read, or a release).
    pending: bool = False


class HeldWatch:
    """A relay node's view of which of its verified workers the kernel holds."""

    def __init__(self, read_every_s: float = READ_EVERY_S) -> None:
        self.read_every_s = read_every_s
        self._w: dict[int, _Watched] = {}

    def watch(self, sid: int, interval_ms: int, now: float) -> None:
        """A worker stream whose pid this node verified (only those are read)."""
        self._w[sid] = _Watched(max(1, interval_ms), now)

    def forget(self, sid: int) -> None:
        self._w.pop(sid, None)

    def heard(self, sid: int, now: float) -> None:
        """A message of ``sid`` arrived: it runs. Called per message, so O(1)."""
        w = self._w.get(sid)
        if w is None:
            return
        w.heard_at = now
        if w.how:  # it reported after a read that found it held
            w.how, w.seen_at, w.pending = "", now, True

    def due(self, now: float) -> list[int]:
        """The streams to read now: silent (or held) ones not read this cadence."""
        return [
            sid
            for sid, w in self._w.items()
            if (w.how or now - w.heard_at > stale_after_s(w.interval_ms))
            and now - w.read_at >= self.read_every_s
        ]

    def seen(self, sid: int, how: str, read_at: float) -> None:
        """What a read started at ``read_at`` found ("" = not held)."""
        w = self._w.get(sid)
        if w is None:
            return
        w.read_at = read_at
        if w.heard_at > read_at:
            return  # it reported while we read: that report is the newer word
        if how or w.how:
            # A held read is sent every time (the upstream's word stays fresh);
            # a read that finds a held worker running is a release.
            w.pending = True
        w.how, w.seen_at = how, read_at

    def updates(self, now: float) -> list[tuple[int, str, float]]:
        """(stream id, how, seconds since read) of every update not sent yet."""
        out = []
        for sid, w in self._w.items():
            if w.pending:
                w.pending = False
                out.append((sid, w.how, max(0.0, now - w.seen_at)))
        return out

    def resend(self) -> None:
        """A new Relay stream knows nothing: every held worker's word goes again.
        A release is not needed there (its sessions start unheld)."""
        for w in self._w.values():
            w.pending = bool(w.how)

    def held(self) -> dict[int, str]:
        """stream id -> how, for every worker held now."""
        return {sid: w.how for sid, w in self._w.items() if w.how}
