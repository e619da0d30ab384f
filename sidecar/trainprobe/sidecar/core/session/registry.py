"""The registry of worker sessions, keyed by (job, rank), and their one writer.

Pure state transitions: a Hello opens or resumes a session, a report updates
it (``core/session/fold.py``, its report path), a stream end closes it. Every call
takes ``now`` (sidecar monotonic seconds), so tests drive time by hand. No
other module assigns an attribute of a :class:`WorkerState`
(tests/test_imports.py checks): the engine's runner applies the hang
machine's verdicts and kill decisions through the named methods here
(:meth:`Registry.set_verdict`, :meth:`Registry.mark_decided`,
:meth:`Registry.mark_killed`), and the transports the route of a session
(:meth:`Registry.set_route`, :meth:`Registry.set_relay_interval`).
"""

from __future__ import annotations

from collections.abc import Iterator

from trainprobe.sidecar.core.limits import MAX_ENDED_SESSIONS, MAX_SESSIONS
from trainprobe.sidecar.core.session.arrival import ArrivalTracker
from trainprobe.sidecar.core.session.fold import fold_report, lag_stats
from trainprobe.sidecar.core.session.model import (
    HelloData,
    ReportData,
    Verdict,
    VerifiedProcess,
    WorkerKey,
    WorkerState,
)
from trainprobe.sidecar.core.session.session_rule import (
    held_by,
    other_uid,
    same_process,
    takes_over,
)
from trainprobe.sidecar.core.session.validate import validate_hello, validate_report

#: Protocol versions this sidecar accepts.
SUPPORTED_PROTOCOLS = range(1, 2)


class RegistryError(Exception):
    """A session that cannot be opened. ``code`` names the gRPC status to use."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class Registry:
    """All worker sessions this sidecar knows, live and recently ended."""

    def __init__(
        self,
        forget_after_s: float = 600.0,
        takeover_after_s: float = 10.0,
        max_sessions: int = MAX_SESSIONS,
        max_ended: int = MAX_ENDED_SESSIONS,
    ) -> None:
        self._workers: dict[WorkerKey, WorkerState] = {}
        self.forget_after_s = forget_after_s
        #: A live session silent this long (the heartbeat timeout) loses its rank
        #: to a new Hello, so a squatter cannot hold a rank for longer.
        self.takeover_after_s = takeover_after_s
        self.max_sessions = max_sessions
        self.max_ended = max_ended
        #: Keys of ended sessions, oldest end first (a dict keeps the order):
        #: what goes first when clients that come and go would fill memory.
        self._ended: dict[WorkerKey, None] = {}
        #: Ended sessions dropped to stay within the bounds, for status and logs.
        self.evicted = 0
        #: Who entered shared collectives late, compared across the sessions here.
        self.arrivals = ArrivalTracker(lag_stats)

    def __len__(self) -> int:
        return len(self._workers)

    def __iter__(self) -> Iterator[WorkerState]:
        return iter(list(self._workers.values()))

    def workers(self) -> list[WorkerState]:
        """Every session, as a new list (safe to hold while sessions come and go)."""
        return list(self._workers.values())

    def get(self, key: WorkerKey) -> WorkerState | None:
        return self._workers.get(key)

    def jobs(self) -> dict[str, list[WorkerState]]:
        out: dict[str, list[WorkerState]] = {}
        for w in self._workers.values():
            out.setdefault(w.hello.job_id, []).append(w)
        return out

    def open(
        self,
        hello: HelloData,
        now: float,
        verified: VerifiedProcess | None = None,
        node: object | None = None,
    ) -> WorkerState:
        """Open a session, or resume the one this same process had.

        ``verified`` is the process the kernel named for this Hello (its
        identity ticket, here or on the relay ``node`` that vouched for it),
        or None. Who resumes, takes or is refused is the session rule
        (``core/session/session_rule.py``, docs/SECURITY.md).

        Raises :class:`RegistryError` for an unsupported protocol, a bad
        identity, a rank another live process of the job holds, or a job of
        another uid.
        """
        try:
            validate_hello(hello, SUPPORTED_PROTOCOLS)
        except ValueError as err:
            code = "FAILED_PRECONDITION" if "protocol_version" in str(err) else "INVALID_ARGUMENT"
            raise RegistryError(code, str(err)) from None
        if verified is not None and verified.pid != hello.pid:
            raise ValueError("verified process does not match the Hello's pid")
        old = self._workers.get(hello.key)
        # After its Goodbye, the same process's Hello is a new hook (a second
        # train()/fit(), the callback's after the start-up hook): it counts its
        # steps from 1 and has its own start-up, so it starts a session of its own.
        if old is not None and old.ended != "goodbye" and same_process(old, hello, verified, node):
            # The same process reconnecting (a blip, or its old stream is not yet
            # seen closed): keep its history; the old stream's close is ignored.
            old.hello, old.node = hello, node if verified is not None else None
            old.connected, old.ended, old.pid_alive_at_end = True, "", None
            old.generation += 1
            self._ended.pop(old.key, None)
            return old
        foreign = other_uid(self._workers.values(), hello, verified, node)
        if foreign:
            raise RegistryError("PERMISSION_DENIED", foreign)
        if old is not None and old.connected:
            if not takes_over(old, verified, now, self.takeover_after_s):
                raise RegistryError("ALREADY_EXISTS", held_by(old, hello, node))
            # Evicted: its stream sees the session closed and ends.
            old.connected, old.ended, old.ended_at = False, "rejected", now
        if old is not None:  # replaced: its stream sees the session closed and ends
            del self._workers[old.key]
            self._ended.pop(old.key, None)
        self._make_room(hello)
        state = WorkerState(hello=hello, first_seen_at=now, last_report_at=now)
        if verified is not None:
            state.verified, state.uid = True, verified.uid
            state.proc_start_ticks = verified.start_ticks
            state.mono_ahead_s = verified.mono_ahead_ns / 1e9
            state.node = node
        if old is not None:
            state.generation = old.generation + 1  # the old stream's close is ignored
        self._workers[hello.key] = state
        return state

    def _make_room(self, hello: HelloData) -> None:
        """Keep within ``max_sessions``: evict the oldest ended session, or refuse."""
        if len(self._workers) < self.max_sessions:
            return
        if not self._ended:
            raise RegistryError(
                "RESOURCE_EXHAUSTED",
                f"this sidecar holds {len(self._workers)} live sessions, its limit "
                f"(MAX_SESSIONS={self.max_sessions}); rank {hello.rank} of job "
                f"{hello.job_id!r} was refused",
            )
        self._evict_oldest_ended()

    def _evict_oldest_ended(self) -> None:
        key = next(iter(self._ended))
        del self._ended[key]
        self._workers.pop(key, None)
        self.evicted += 1

    def apply(
        self, state: WorkerState, report: ReportData, now: float, sampled: bool = True
    ) -> None:
        """Fold a report into its session. Raises ValidationError if absurd.

        Runs for every report: parts a report does not carry (phases, sync,
        GPU) cost a test, not a new empty list or dict. ``sampled=False`` (a
        late report, core/session/overload.py) applies what a verdict reads and
        drops its samples: step times, GPU and sync figures, issue times.
        """
        validate_report(report)
        fold_report(state, report, now, sampled, self.arrivals)

    def close(
        self, state: WorkerState, generation: int, how: str, now: float, pid_alive: bool | None
    ) -> bool:
        """Mark a stream ended: ``goodbye``, ``vanished`` or ``rejected``.

        Returns False (and changes nothing) if a newer stream of the same
        process has taken the session over.
        """
        if state.generation != generation or self._workers.get(state.key) is not state:
            return False
        state.connected = False
        state.ended = how
        state.ended_at = now
        state.pid_alive_at_end = pid_alive
        self._ended[state.key] = None
        while len(self._ended) > self.max_ended:
            self._evict_oldest_ended()
        return True

    def hold_until_fresh(self, resumed_at: float) -> None:
        """After the sidecar's own loop froze: judge no live session from its
        old reports; each must first send one after ``resumed_at``."""
        for w in self._workers.values():
            if w.connected:
                w.fresh_after = resumed_at

    def resume_job(self, job_id: str, resumed_at: float) -> None:
        """The job was paused (every live rank stopped or frozen) and runs again:
        no clock of its ranks counts the pause. Silence counts from the resume
        and nothing else is judged until a report sent after it arrives (as
        after our own freeze), and the stall, start-up and in-flight clocks
        restart there, as at the end of a job-wide phase."""
        for w in self._workers.values():
            if w.connected and w.hello.job_id == job_id:
                w.fresh_after = max(w.fresh_after, resumed_at)
                w.last_phase_end_at = max(w.last_phase_end_at, resumed_at)

    # -- what the engine and the transports set ---------------------------------

    def set_verdict(self, key: WorkerKey, verdict: Verdict, rule: str) -> None:
        """The session of ``key`` (if any) now has ``verdict``, from ``rule``."""
        state = self._workers.get(key)
        if state is not None:
            state.verdict, state.verdict_rule = verdict, rule

    def mark_decided(
        self, key: WorkerKey, rule: str, incident_id: str, evicted: bool = False
    ) -> None:
        """The decision that kills the session of ``key``: its rule and incident, and
        whether it ends by an eviction of its replica group (the job goes on)."""
        state = self._workers.get(key)
        if state is not None:
            state.killed_rule, state.killed_incident = rule, incident_id
            state.evicted = evicted

    @staticmethod
    def mark_killed(state: WorkerState) -> None:
        """trainprobe itself ends this process: its exit is expected (no DEAD incident)."""
        state.killed_by_us = True

    @staticmethod
    def set_route(state: WorkerState, relay: object | None) -> None:
        """How the session's process is reached: over a node sidecar's Relay stream
        (``relay``), else directly. Only the kernel's word makes a process ours to
        signal: a verified direct session is ``local``; a relayed worker is its
        node's to signal (the node verified it or refuses to)."""
        state.relay = relay
        state.local = state.verified and relay is None

    @staticmethod
    def set_relay_interval(state: WorkerState, interval_ms: int) -> None:
        """The relaying node's batch interval: the session is heard that often at best."""
        state.relay_interval_ms = interval_ms

    @staticmethod
    def set_held(state: WorkerState, held: tuple[str, float] | None) -> None:
        """The owning node's word that the kernel holds the process (how, when read),
        or None: it runs again, or its stream is new (``core/hang/held.py``)."""
        state.held = held

    def forget_stale(self, now: float) -> list[WorkerState]:
        """Drop ended sessions older than ``forget_after_s``.

        Runs every tick: it looks at the ended sessions only (``_ended`` holds
        every session that is not connected), not at every live one.
        """
        if not self._ended:
            return []
        workers = self._workers
        gone = [
            w
            for key in self._ended
            if (w := workers.get(key)) is not None
            and not w.connected
            and now - max(w.ended_at, w.last_report_at) > self.forget_after_s
        ]
        for w in gone:
            del self._workers[w.key]
            self._ended.pop(w.key, None)
        return gone
