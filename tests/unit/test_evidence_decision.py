"""The pure decision path of issue 12: evidence, culprit by stacks, kill now or wait,
and the patience that learns from stalls that ended by themselves. Fake clock:
every time is a number passed in."""

from __future__ import annotations

from pathlib import Path

from tests.core_builders import connected
from trainprobe.sidecar.core.hang.patience import AUTO_FLOOR_S, PatienceBook
from trainprobe.sidecar.core.judge.culprit import (
    INCONCLUSIVE,
    MISMATCH,
    STRAGGLER,
    UNRESPONSIVE,
    Diagnosis,
    GroupProgress,
    RankSummary,
    analyze,
)
from trainprobe.sidecar.core.judge.decision import judge, refine, suspect_line
from trainprobe.sidecar.core.judge.evidence import (
    ProcSample,
    RankEvidence,
    StackSample,
    assess,
    classify_frames,
    definitive_reason,
    stale_after_s,
)
from trainprobe.sidecar.core.judge.stackframes import Frame, parse_stacks, training_thread
from trainprobe.sidecar.core.session.model import heard_every_ms
from trainprobe.sidecar.core.session.registry import Registry

SITE = "/venv/lib/python3.11/site-packages"


def frames(*spec: tuple[str, str, str]) -> tuple[Frame, ...]:
    """Innermost first: (file, function, code)."""
    return tuple(Frame(f, i + 1, fn, code) for i, (f, fn, code) in enumerate(spec))


USER_SLEEP = frames(("/job/train.py", "hang", "time.sleep(3600)"), ("/job/train.py", "main", ""))
DDP_BACKWARD = frames(
    (f"{SITE}/torch/autograd/graph.py", "_engine_run_backward", ""),
    (f"{SITE}/torch/autograd/__init__.py", "backward", ""),
    (f"{SITE}/torch/_tensor.py", "backward", ""),
    ("/job/train.py", "main", "loss.backward()"),
)
ALLREDUCE = frames(
    (f"{SITE}/torch/distributed/c10d_logger.py", "wrapper", ""),
    (f"{SITE}/torch/distributed/distributed_c10d.py", "all_reduce", ""),
    ("/job/train.py", "main", "dist.all_reduce(metric)"),
)
LOADER = frames(
    ("/usr/lib/python3.11/threading.py", "wait", ""),
    ("/usr/lib/python3.11/queue.py", "get", ""),
    (f"{SITE}/torch/utils/data/dataloader.py", "_get_data", ""),
    (f"{SITE}/torch/utils/data/dataloader.py", "__next__", ""),
    ("/job/train.py", "main", "batch = next(it)"),
)


def test_frames_are_classified_by_library_then_by_the_users_line() -> None:
    assert classify_frames(USER_SLEEP) == "sleep"
    assert classify_frames(ALLREDUCE) == "collective"
    assert classify_frames(DDP_BACKWARD) == "backward"
    # threading's wait sits under the loader: the loader names it.
    assert classify_frames(LOADER) == "data_loading"
    assert classify_frames(frames((f"{SITE}/torch/serialization.py", "save", ""))) == "checkpoint"
    assert classify_frames(frames((f"{SITE}/torch/_dynamo/eval_frame.py", "_fn", ""))) == "compile"
    assert classify_frames(frames(("/job/t.py", "f", "lock.acquire()"))) == "lock"
    assert classify_frames(frames(("/usr/lib/python3.11/threading.py", "acquire", ""))) == "lock"
    assert classify_frames(frames(("/job/t.py", "f", "data = fh.read(1 << 20)"))) == "reading"
    assert classify_frames(frames(("/job/t.py", "f", "x = y @ z"))) == "user"
    assert classify_frames(()) == "user"


def test_a_thread_inside_the_hooks_own_collective_wrappers_waits_in_a_collective() -> None:
    # The fragments name the hook's files where they are: a frame in its DDP
    # comm hook or collective wrapper, as an installed hook reports it.
    hooks = Path(__file__).resolve().parents[2] / "hooks"
    for module, fn in (("ddp", "comm_hook"), ("collectives", "collective")):
        [source] = hooks.glob(f"trainprobe/hooks/**/{module}.py")
        installed = f"{SITE}/{source.relative_to(hooks).as_posix()}"
        inside = frames(
            ("/usr/lib/python3.11/threading.py", "wait", ""),
            (installed, fn, ""),
            ("/job/train.py", "main", "loss.backward()"),
        )
        assert classify_frames(inside) == "collective", installed


def test_the_hooks_dump_keeps_the_source_line_for_classification() -> None:
    text = (
        'Thread 0x1 "MainThread" (most recent call last):\n'
        '  File "/job/train.py", line 10, in main\n'
        "    hang()\n"
        '  File "/job/train.py", line 3, in hang\n'
        "    time.sleep(3600)\n"
    )
    main = training_thread(parse_stacks(text))
    assert main is not None and main.frames[0].code == "time.sleep(3600)"
    assert classify_frames(main.frames) == "sleep"


def proc(at: float, state: str = "S", cpu: int = 0, rchar: int | None = 0) -> ProcSample:
    return ProcSample(at, state, cpu, rchar, 0, 100)


def test_assess_measures_cpu_io_and_whether_the_stack_moved() -> None:
    busy = assess(1, [proc(0.0, "R", 0), proc(1.0, "R", 95)], [], True)
    assert busy.cpu_busy is True and busy.state == "running"
    idle = assess(
        1,
        [proc(0.0, cpu=10, rchar=5), proc(2.0, cpu=11, rchar=5)],
        [StackSample(0.0, USER_SLEEP), StackSample(1.0, USER_SLEEP)],
        True,
    )
    assert idle.cpu_busy is False and idle.io_moving is False and idle.stack_same is True
    assert idle.activity == "sleep" and idle.label == "sleep"
    one = assess(1, [proc(0.0)], [StackSample(0.0, USER_SLEEP)], True)
    assert one.cpu_ratio is None and one.stack_same is None  # one sample proves no motion
    disk = assess(1, [proc(0.0, "D"), proc(1.0, "D")], [], True)
    assert disk.activity == "reading" and disk.label == "uninterruptible I/O"
    assert definitive_reason(disk) == ""
    # Z once may be a process still tearing its threads down; Z twice is a zombie.
    assert assess(1, [proc(0.0, "S"), proc(0.3, "Z")], [], True).state == "exiting"
    assert assess(1, [proc(0.0, "Z")], [], True).state == "exiting"
    assert assess(1, [proc(0.0, "Z"), proc(0.3, "Z")], [], True).state == "zombie"
    assert definitive_reason(assess(1, [proc(0.0, "S"), proc(0.3, "Z")], [], True)) == ""


def test_only_the_kernels_word_is_definitive() -> None:
    assert definitive_reason(RankEvidence(1, state="stopped")) == "stopped"
    assert definitive_reason(RankEvidence(1, state="zombie")) == "zombie"
    assert definitive_reason(RankEvidence(1, state="gone")) == "gone"
    # A debugger's stop, a lock, a silent reporter, a busy CPU: a person or a
    # healthy job may be behind each.
    for ev in (
        RankEvidence(1, state="traced"),
        RankEvidence(1, state="sleeping", activity="lock", stack_same=True, cpu_ratio=0.0),
        RankEvidence(1, state="sleeping", reporter_alive=False),
        RankEvidence(1, state="running", cpu_ratio=1.0),
    ):
        assert definitive_reason(ev) == "", ev


def waiting_ev(rank: int) -> RankEvidence:
    return RankEvidence(rank, state="sleeping", cpu_ratio=0.0, activity="backward", where="t:1")


def test_without_collective_data_the_stacks_name_the_rank_that_is_elsewhere() -> None:
    diag = Diagnosis(INCONCLUSIVE, summary="every rank stopped after step 14")
    ev = {
        0: waiting_ev(0),
        1: RankEvidence(1, "sleeping", 0.0, activity="sleep", where="train.py:3 in hang"),
        2: waiting_ev(2),
        3: RankEvidence(3, "sleeping", 0.0, activity="collective", where="x"),
    }
    out = refine(diag, ev)
    assert out.kind == STRAGGLER and out.culprits == (1,) and out.waiting == (0, 2, 3)
    assert out.conclusive and out.evidence["decided_by"] == "stacks"
    assert "rank 1 is not in a collective (sleep at train.py:3 in hang)" in out.summary
    # A backward that burns CPU is computing, not waiting: no rank stands out.
    busy = {r: RankEvidence(r, "running", 1.0, activity="backward") for r in range(3)}
    assert refine(diag, busy).culprits == ()
    # Everyone elsewhere (a shared storage stall): no culprit from stacks.
    reading = {r: RankEvidence(r, "sleeping", 0.0, activity="reading") for r in range(3)}
    assert not refine(diag, reading).conclusive


def summary(rank: int, seq: int, inflight: bool, reporting: bool = True) -> RankSummary:
    g = GroupProgress(
        "default",
        issued=seq,
        completed=seq - 1 if inflight else seq,
        inflight_age_s=4.0 if inflight else None,
        inflight_op="allreduce",
        inflight_seq=seq if inflight else 0,
    )
    return RankSummary(
        rank=rank,
        world_size=2,
        pid=10 + rank,
        has_step=True,
        step=700 if rank == 0 else 2,
        reporting=reporting,
        report_age_s=0.1 if reporting else 70.0,
        groups=(g,),
    )


def test_a_stale_report_is_analysed_as_unresponsive_not_at_its_old_collective() -> None:
    """Issue 12's SIGSTOP case: rank 1's last report, 700 steps old, showed an
    allreduce in flight at an old seq; compared as live it read as a mismatch."""
    live = analyze([summary(0, 701, True), summary(1, 3, True)])
    assert live.kind == MISMATCH and live.confidence <= 0.3  # the old, wrong reading
    stale = analyze([summary(0, 701, True), summary(1, 3, True, reporting=False)])
    assert stale.kind == UNRESPONSIVE and stale.culprits == (1,) and stale.waiting == (0,)
    # And the kernel's word overrides whatever the reports said.
    out = refine(live, {0: waiting_ev(0), 1: RankEvidence(1, state="stopped")})
    assert out.kind == UNRESPONSIVE and out.culprits == (1,) and out.confidence >= 0.95
    # Stale means older than 2.5 report intervals (at least 1 s).
    assert stale_after_s(1000) == 2.5 and stale_after_s(100) == 1.0


def test_a_relayed_rank_is_stale_only_after_its_nodes_batch_interval() -> None:
    # A node batching every 2.5 s hands over reports up to ~2.6 s old: taken as
    # the hook's 100 ms cadence, every healthy relayed rank read as silent.
    w = connected(Registry(), interval_ms=100)
    assert heard_every_ms(w) == 100 and stale_after_s(heard_every_ms(w)) == 1.0
    w.relay_interval_ms = 200  # the default batch interval changes nothing
    assert stale_after_s(heard_every_ms(w)) == 1.0
    w.relay_interval_ms = 2500
    assert heard_every_ms(w) == 2500 and stale_after_s(heard_every_ms(w)) == 6.25


STRAGGLER_1 = Diagnosis(STRAGGLER, (1,), (0,), 0.95, "rank 1 never entered allreduce #5")


def test_definitive_evidence_kills_at_once() -> None:
    ev = {0: waiting_ev(0), 1: RankEvidence(1, state="stopped")}
    j = judge(STRAGGLER_1, ev, onset_at=100.0, patience_s=90.0, patience_basis="x", now=103.0)
    assert j.act and j.definitive and j.rule == "stopped" and "SIGSTOP" in j.why
    gone = judge(STRAGGLER_1, {1: RankEvidence(1, state="gone")}, 100.0, 90.0, "x", 101.0)
    assert gone.act and gone.rule == "gone"
    mismatch = Diagnosis(MISMATCH, (1,), (0, 1, 2), 0.85, "different collectives")
    j = judge(mismatch, {}, 100.0, 90.0, "x", 102.0)
    assert j.act and j.rule == "mismatch" and j.definitive
    rec = j.to_record()
    assert rec["stalled_s"] == 2.0 and rec["rule"] == "mismatch" and rec["definitive"] is True


def test_a_mismatch_tie_is_ended_at_once_but_a_split_over_sequences_waits() -> None:
    """Two ranks issued collective #42 as all_reduce and all_gather: never matching.
    Ranks at different sequence numbers may only be seen at different moments."""
    tie = Diagnosis(MISMATCH, (), (0, 1), 0.3, "different collectives", {"same_seq": True})
    j = judge(tie, {}, 100.0, 90.0, "x", 103.0)
    assert j.act and j.rule == "mismatch" and j.definitive and "ranks [0, 1]" in j.why
    split = Diagnosis(MISMATCH, (), (0, 1), 0.3, "different collectives", {"same_seq": False})
    j = judge(split, {}, 100.0, 90.0, "x", 103.0)
    assert not j.act and not j.definitive
    assert judge(split, {}, 100.0, 90.0, "x", 190.0).rule == "patience"


def test_ambiguous_evidence_waits_for_the_patience_then_acts() -> None:
    sleeping = RankEvidence(1, "sleeping", 0.0, activity="sleep", where="loader.py:88 in read")
    ev = {0: waiting_ev(0), 1: sleeping}
    for stalled in (3.0, 60.0, 89.9):
        j = judge(STRAGGLER_1, ev, 100.0, 90.0, "auto floor", 100.0 + stalled)
        assert not j.act and j.rule == "" and "ambiguous" in j.why, stalled
    j = judge(STRAGGLER_1, ev, 100.0, 90.0, "auto floor", 190.0)
    assert j.act and j.rule == "patience" and not j.definitive
    assert "rank 1 sleep at loader.py:88 in read" in j.why
    # Busy CPU, a lock, uninterruptible I/O, a silent reporter: all wait.
    for other in (
        RankEvidence(1, "running", 1.0, activity="user"),
        RankEvidence(1, "sleeping", 0.0, activity="lock", stack_same=True),
        RankEvidence(1, "disk", 0.0, activity="reading"),
        RankEvidence(1, "sleeping", 0.0, reporter_alive=False),
    ):
        assert not judge(STRAGGLER_1, {1: other}, 100.0, 90.0, "", 150.0).act, other
    # Without a culprit, the patience still bounds the wait.
    none = Diagnosis(INCONCLUSIVE)
    assert not judge(none, {}, 100.0, 90.0, "", 189.0).act
    assert judge(none, {}, 100.0, 90.0, "", 190.0).rule == "patience"


def test_the_status_line_while_watched() -> None:
    ev = {1: RankEvidence(1, "sleeping", 0.0, activity="reading", where="loader.py:88 in get")}
    j = judge(STRAGGLER_1, ev, 100.0, 90.0, "auto floor", 112.0)
    line = suspect_line(STRAGGLER_1, ev, j, 112.0)
    assert line == "HUNG? 12 s of 90 s patience — rank 1 at loader.py:88 in get (reading)"


def test_auto_patience_keeps_a_multiple_of_the_longest_stall_that_ended_by_itself() -> None:
    book = PatienceBook()
    assert book.patience_s("j") == (AUTO_FLOOR_S, "auto floor")
    book.record("j", 30.0, "train.py:9 in eval", "collective", now=1.0)
    assert book.patience_s("j")[0] == AUTO_FLOOR_S  # 2 x 30 s is below the floor
    book.record("j", 70.0, "loader.py:88 in get", "reading", now=2.0)
    seconds, basis = book.patience_s("j")
    assert seconds == 140.0 and "loader.py:88" in basis
    assert book.patience_s("other") == (AUTO_FLOOR_S, "auto floor")  # per job
    assert PatienceBook(5.0).patience_s("j") == (5.0, "explicit")


def test_under_the_defaults_no_healthy_stall_up_to_60s_is_killed_and_faults_die_by_120s() -> None:
    """The shipped default (auto, empty history) against issue 12's bounds."""
    book = PatienceBook()
    patience, basis = book.patience_s("fresh-job")
    ev = {1: RankEvidence(1, "sleeping", 0.0, activity="reading", where="r.py:1")}
    for t in range(0, 61):  # every round of a healthy 60 s stall, plus a 1 s round late
        assert not judge(STRAGGLER_1, ev, 0.0, patience, basis, t + 1.0).act, t
    killed_at = next(
        t for t in range(0, 200) if judge(STRAGGLER_1, ev, 0.0, patience, basis, t).act
    )
    assert killed_at + 1.0 <= 120.0  # one more evidence round at most
