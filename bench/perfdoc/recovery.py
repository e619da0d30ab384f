"""Recovery without restarting healthy ranks: replicated jobs (torchft), side by side with
torchft alone and the non-replicated Ray Train and torchrun restarts."""

from __future__ import annotations

from .core import CASES, Lines, Result, closing, head, missing, reproduce, row, s, yes

RECOVERY_CMD = "python bench/bench_torchft.py --trials 3"
FAULT_ORDER = ("sleep", "lock", "gil", "stop", "kill9")
HEALTHY = {
    "stall8": "one replica stalls 8 s, then goes on",
    "checkpoint": "a declared 15 s checkpoint on one replica",
    "eval": "a 5 s eval on every replica, every 25 steps",
}
ORCHESTRATORS = {
    "ray_train": "Ray Train (DDP, FailureConfig)",
    "torchrun": "torchrun --max-restarts",
}


def _ok(x: float | None, goal: float) -> bool:
    return x is not None and x <= goal


def _alone(g: Result | None, limit_s: float) -> str:
    if g is None:
        return "–"
    x = g["survivor_resumed_s"]
    return s(x) if x is not None else f"not within {limit_s:g} s"


def recovery_goals(r: Result) -> list[tuple[str, str, str, str, bool]]:
    """(name, goal, measured, anchor, met) for the headline table."""
    sm = r["summary"]
    f = sm["faults"]
    out = []
    for kind, faults, goal in (
        ("definitive", ("stop", "kill9"), 5.0),
        ("ambiguous", ("sleep", "lock", "gil"), 15.0),
    ):
        got = [f.get(f"{x}/trainprobe") for x in faults if f.get(f"{x}/trainprobe")]
        worst = max((g["survivor_resumed_s"] or float("inf") for g in got), default=None)
        same = all(g["survivor_same_pid"] for g in got)
        limit = r["settings"]["limit_s"]
        alone = [_alone(f.get(f"{x}/alone"), limit) for x in faults if f.get(f"{x}/alone")]
        out.append(
            (
                f"survivors commit again, {kind} faults",
                f"≤ {goal:g} s, never restarted",
                f"worst median {s(worst)}, same pid: {'yes' if same else 'no'}",
                "torchft alone: " + ", ".join(alone) if alone else "–",
                bool(got) and _ok(worst, goal) and same,
            )
        )
    if ray := sm["ray"].get("sleep"):
        ok = _ok(ray["replacement_stepping_s"], 20.0) and ray["params_equal"]
        ok = ok and ray["single_group_replacement"]
        ddp = sm["restart"].get("ray_train")
        out.append(
            (
                "Ray Train replacement steps",
                "≤ 20 s, equal parameters",
                f"median {s(ray['replacement_stepping_s'])}",
                f"no replicas: all ranks step again after {s(ddp['all_stepping_s'])}"
                if ddp
                else "–",
                ok,
            )
        )
    healthy = sm["healthy"].values()
    ev = sum(h["evictions"] for h in healthy)
    waiting = sum(h["waiting_replica_kills"] for h in healthy) + sum(
        g["waiting_replica_kills"] for g in f.values()
    )
    n = sum(h["trials"] for h in healthy)
    out.append(
        (
            "healthy replicated jobs evicted",
            "0; 0 kills of a waiting replica",
            f"{ev} of {n}; {waiting}",
            "–",
            n > 0 and ev == 0 and waiting == 0,
        )
    )
    return out


def recovery_section(r: Result | None, loaded: Result | None = None) -> Lines:
    out = ["## Recovery without restarting healthy ranks (torchft replicas)", ""]
    if r is None:
        return out + missing("torchft", RECOVERY_CMD)
    sm, st = r["summary"], r["settings"]
    f = sm["faults"]
    out += [
        "Two replica groups train in lockstep with torchft 0.2.0 (real Manager, ProcessGroupGloo,",
        "a real lighthouse with `--heartbeat_timeout_ms "
        f"{st['heartbeat_timeout_ms']}`), each under its own `torchrun --max-restarts`",
        "(the recipe in docs/DEPLOY.md). Replica `train_1` faults at a committed step, while",
        "`train_0` waits for it inside torchft. `trainprobe` is the sidecar with its shipped",
        "defaults (replicated patience `auto`: 10 s floor); `alone` is torchft by itself. Times",
        "are from the onset, on the machine's wall clock: the survivor's next committed step,",
        "the culprit's process gone, and its replacement (restarted by its torchrun, healed",
        f"from the survivor) committing. Medians of {st['trials']} trials each.",
        "",
        *head(
            "fault", "survivor commits again", "torchft alone", "culprit gone",
            "replacement steps", "survivor same pid", "goal", "",
        ),
    ]  # fmt: skip
    for fault in FAULT_ORDER:
        tp, alone = f.get(f"{fault}/trainprobe"), f.get(f"{fault}/alone")
        if tp is None:
            continue
        goal = tp["goal_s"]
        out.append(
            row(
                CASES.get(fault, fault),
                f"**{s(tp['survivor_resumed_s'])}**",
                _alone(alone, st["limit_s"]),
                s(tp["culprit_gone_s"]),
                s(tp["replacement_stepping_s"]),
                "yes" if tp["survivor_same_pid"] else "**no**",
                f"≤ {goal:g} s",
                yes(_ok(tp["survivor_resumed_s"], goal) and tp["survivor_same_pid"]),
            )
        )
    out += [
        "",
        "Ambiguous faults (sleep, deadlock, GIL) are evicted once the stall has lasted the",
        "replicated patience (10 s after the last step), then the survivor waits one lighthouse",
        "heartbeat timeout for the next quorum. Definitive ones are evicted when found: SIGSTOP",
        "at the stall threshold of the survivor's in-flight allreduce (3 s); kill -9 needs no",
        "sidecar (the peer's socket closes). torchft alone never ends the hung replica: after an",
        "ambiguous fault the survivor's allreduce times out (gloo, 30 s), then its next quorum",
        "waits for the hung replica, which still heartbeats, until the Manager's 60 s quorum",
        "timeout raises out of `optimizer.step()`, about 90 s after the onset.",
        "",
        "**Healthy replicated jobs** (trainprobe, shipped defaults): evictions and kills, goal 0.",
        "",
        *head("case", "trials", "evictions", "kills", "stall seen", "finished, same pids"),
    ]
    for case, text in HEALTHY.items():
        h = sm["healthy"].get(case)
        if h is None:
            continue
        out.append(
            row(
                text,
                h["trials"],
                f"**{h['evictions']}**",
                h["kills"],
                s(h["stall_s"]) if h["stall_s"] is not None else "–",
                "yes" if h["finished"] else "**no**",
            )
        )
    kills = sum(g["waiting_replica_kills"] for g in f.values()) + sum(
        h["waiting_replica_kills"] for h in sm["healthy"].values()
    )
    out += ["", f"Kills of a waiting replica, in every case above: **{kills}**.", ""]
    if ray := sm["ray"].get("sleep"):
        out += [
            "**Ray Train** (`TorchftConfig`, 2 workers, each its own replica group; the per-node",
            "sidecar with shipped defaults; worker 1 sleeps in its step): the replacement's",
            "timeline from onset. Ray Train's part is from the culprit gone to the replacement",
            "entering `train_func` (its health poll, every 2 s, then a new worker actor and its",
            "train context); then torchft's Manager and the heal from the survivor.",
            "",
            *head(
                "survivor commits again", "culprit gone", "replacement enters train_func",
                "Manager made", "replacement steps", "goal", "",
            ),
            row(
                s(ray["survivor_resumed_s"]), s(ray["culprit_gone_s"]),
                s(ray["replacement_begin_s"]), s(ray["replacement_start_s"]),
                f"**{s(ray['replacement_stepping_s'])}**", "≤ 20 s",
                yes(_ok(ray["replacement_stepping_s"], 20.0)),
            ),
            "",
            f"Parameters of the replacement equal the survivor's: "
            f"{'yes' if ray['params_equal'] else '**no**'}; a single-group replacement (worker 0",
            f"started once, worker 1 twice) in every trial: "
            f"{'yes' if ray['single_group_replacement'] else '**no**'}; "
            f"{ray['evictions']} evictions in {ray['trials']} trials, "
            f"{ray['other_kills']} other kills.",
            "",
        ]  # fmt: skip
    if sm["restart"]:
        out += [
            "**Without replicas**, in the same run: 2 DDP ranks, rank 1 sleeps in its step, the",
            "sidecar with its shipped defaults kills (ambiguous evidence: the 90 s patience of a",
            "non-replicated job), and the orchestrator restarts every rank from the last",
            "checkpoint. Onset to every rank stepping again:",
            "",
            *head("orchestrator", "trials", "onset → all ranks step again", "patience"),
        ]
        for orch, text in ORCHESTRATORS.items():
            g = sm["restart"].get(orch)
            if g is not None:
                errors = f" ({len(g['errors'])} failed)" if g["errors"] else ""
                out.append(
                    row(text, f"{g['trials']}{errors}", s(g["all_stepping_s"]), s(g["patience_s"]))
                )
        out.append("")
    return out + closing(_where(r), "torchft", "replicated recovery") + _loaded(loaded)


def _where(r: Result) -> Result:
    lb, la = r.get("load_before") or ["?"], r.get("load_after") or ["?"]
    burn = r["settings"].get("burn") or 0
    extra = f", {burn} busy-loop processes alongside" if burn else ""
    return {
        **r,
        "device": f"{r.get('cpus')} CPUs{extra}, load average {lb[0]} at the start and {la[0]}"
        f" at the end ({r.get('wall_s', 0) / 60:.0f} min)",
    }


def _loaded(r: Result | None) -> Lines:
    """The same trials on a loaded machine: do the margins hold?"""
    if r is None:
        return []
    sm = r["summary"]
    loads = [t["load"] for ts in r["trials"].values() for t in ts if "load" in t]
    out = [
        f"**On a loaded machine** ({r['settings']['burn']} busy loops beside the job on its 2",
        f"cores; load average {min(loads):.0f}–{max(loads):.0f} at the trials' starts): the",
        "ambiguous goal and the healthy 8 s stall's margin under the same shipped defaults.",
        "",
        *head("case", "trials", "survivor commits again", "culprit gone", "evictions", "goal", ""),
    ]
    for key, g in sm["faults"].items():
        fault, mode = key.split("/")
        if mode != "trainprobe":
            continue
        ok = _ok(g["survivor_resumed_s"], g["goal_s"]) and g["survivor_same_pid"]
        out.append(
            row(
                CASES.get(fault, fault), g["trials"], f"**{s(g['survivor_resumed_s'])}**",
                s(g["culprit_gone_s"]), g["evictions"], f"≤ {g['goal_s']:g} s", yes(ok),
            )
        )  # fmt: skip
    for case, h in sm["healthy"].items():
        out.append(
            row(
                HEALTHY.get(case, case), h["trials"], f"stall {s(h['stall_s'])}", "–",
                f"**{h['evictions']}**", "0 evictions", yes(h["evictions"] == 0 and h["finished"]),
            )
        )  # fmt: skip
    return [*out, "", *reproduce(_where(r), "torchft_loaded")]
