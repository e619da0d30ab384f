"""How soon training steps again after a kill, and what the healthy ranks lost: the
restart of every rank (torchrun, Ray Train) beside the replicated loop of ``trainprobe run``."""

from __future__ import annotations

from ..core import Lines, Result, command, head, missing, plot_ref, row, s, yes

__all__ = [
    "DEFINITIVE_GOAL_S",
    "HANGS",
    "RESTART_ANCHOR",
    "SHORT",
    "ray_restart",
    "ray_sleep",
    "restart_goal",
    "restart_goals",
    "restart_section",
    "stack_results",
]

RESTART_ANCHOR = "how-soon-training-steps-again-and-what-the-healthy-ranks-lost"
STACKS = {"plain": "plain script", "hf": "Hugging Face `Trainer`", "lightning": "Lightning, `ddp`"}
SHORT = {"plain": "plain", "hf": "HF", "lightning": "Lightning"}
HANGS = {"stop": "SIGSTOP", "sleep": "sleep"}
#: A restart's goal for a definitive hang (SIGSTOP), by orchestrator.
DEFINITIVE_GOAL_S = {"torchrun": 12.0, "ray_train": 20.0}
STEP_GOAL_PCT = 5.0


def restart_goal(r: Result, hang: str) -> float:
    return float(r["goals_s"].get(hang) or r["hang_patience_s"] + 10)


def stack_results(r: Result, hang: str) -> list[tuple[str, Result]]:
    return [(k, g) for k in STACKS if (g := r["stacks"].get(f"{k}/{hang}"))]


def ray_restart(ft: Result | None, hang: str = "sleep") -> Result | None:
    """Ray Train's restart of every rank after a hung rank (bench_torchft.py's restart
    section): a sleeping one in torchft.json, a SIGSTOPped one in ray_restart.json."""
    key = "ray_train" if hang == "sleep" else f"ray_train/{hang}"
    return ((ft or {}).get("summary") or {}).get("restart", {}).get(key)


def ray_sleep(ft: Result | None, ray: Result | None) -> tuple[Result | None, Result | None]:
    """Ray Train's restart after a sleeping rank and the result file it comes from:
    ray_restart.json's sleep trials where it has them, else torchft.json's."""
    for src in (ray, ft):
        if x := ray_restart(src):
            return x, src
    return None, None


def _le(x: float | None, goal: float) -> bool:
    """Within the goal; a figure a failed run left out (None) is not."""
    return x is not None and x <= goal


def _n(x: float | None) -> str:
    return "–" if x is None else f"{x:g}"


def _slash(gs: list[tuple[str, Result]], key: str) -> str:
    return " / ".join(_n(g["summary"][key]) for _, g in gs)


def _failures(r: Result) -> tuple[int, int]:
    every = [g["summary"] for g in r["stacks"].values()]
    return sum(x["failed_restarts"] for x in every), sum(x["trials"] for x in every)


def restart_goals(
    r: Result | None,
    rep: Result | None,
    ft: Result | None,
    quiet: Result | None = None,
    ray: Result | None = None,
) -> list[tuple[str, str, str, str, bool]]:
    """(name, goal, measured, anchor, met) for the headline table; ``ray``: Ray Train's
    restart after a SIGSTOP (ray_restart.json)."""
    out = []
    if r is not None:
        failed, n = _failures(r)
        stacks = {k.split("/")[0] for k in r["stacks"]}
        per = [sum(g["summary"]["trials"] for k, g in r["stacks"].items() if k.startswith(f"{x}/"))
               for x in stacks]  # fmt: skip
        got, ok = f"{failed} of {n}", failed == 0 and n > 0 and min(per) >= 10
        if quiet is not None:
            qf, qn = _failures(quiet)
            got += f"; quiet machine {qf} of {qn}"
            ok = ok and qf == 0
        out.append(("restarts that failed", "0 in ≥ 10 trials a stack", got, "–", ok))
        names = " / ".join(SHORT[k] for k, _ in stack_results(r, "stop"))
        for hang, goal_txt, anchor in (
            ("stop", f"≤ {restart_goal(r, 'stop'):g} s (torchrun)", ""),
            ("sleep", f"≤ patience + 10 s ({restart_goal(r, 'sleep'):g} s)",
             "NCCL watchdog 10 min (gloo 30 min), then the restart"),
        ):  # fmt: skip
            gs = stack_results(r, hang)
            if not gs:
                continue
            meds = [g["summary"]["stepping_again_s_median"] for _, g in gs]
            got = f"medians {_slash(gs, 'stepping_again_s_median')} s ({names})"
            ok = all(_le(m, restart_goal(r, hang)) for m in meds)
            if hang == "sleep" and (rs := ray_sleep(ft, ray)[0]):
                got += f"; Ray Train {s(rs['all_stepping_s'])}"
                ok = ok and _le(rs["all_stepping_s"], restart_goal(r, hang))
            if hang == "stop" and (rs := ray_restart(ray, hang)):
                goal = DEFINITIVE_GOAL_S["ray_train"]
                got += f"; Ray Train {s(rs['all_stepping_s'])} (≤ {goal:g} s)"
                ok = ok and _le(rs["all_stepping_s"], goal)
            if quiet is not None and (qs := stack_results(quiet, hang)):
                got += f"; quiet machine {_slash(qs, 'stepping_again_s_median')} s"
                ok = ok and all(
                    _le(g["summary"]["stepping_again_s_median"], restart_goal(quiet, hang))
                    for _, g in qs
                )
            got += f"; {_slash(gs, 'steps_redone_median')} steps redone"
            if hang == "stop" and rep is not None:
                surv = rep["summary"]["faults"].get("stop")
                anchor = f"replicated: survivor {s(surv['survivor_resumed_s'])}" if surv else "–"
            out.append((f"every rank steps again after a {HANGS[hang]}", goal_txt, got, anchor,
                        ok))  # fmt: skip
    if rep is not None:
        f, st = rep["summary"]["faults"], rep["summary"]["steptime"]
        if (stop := f.get("stop")) and (sleep := f.get("sleep")):
            plain = {h: r["stacks"].get(f"plain/{h}") for h in HANGS} if r is not None else {}
            anchor = "no replicas: " + ", ".join(
                s(g["summary"]["stepping_again_s_median"]) for g in plain.values() if g
            ) if plain else "–"  # fmt: skip
            ok = all(
                _le(x["survivor_resumed_s"], x["goal_survivor_s"]) and x["survivor_same_pid"]
                for x in (stop, sleep)
            )
            out.append((
                "replicated (`trainprobe run`): survivors commit again",
                f"≤ {stop['goal_survivor_s']:g} s definitive, ≤ {sleep['goal_survivor_s']:g} s"
                " ambiguous, same pid",
                f"{s(stop['survivor_resumed_s'])}, {s(sleep['survivor_resumed_s'])}", anchor, ok,
            ))  # fmt: skip
            out.append((
                "replicated: the evicted replica steps again", f"≤ {stop['goal_evicted_s']:g} s",
                f"{s(stop['evicted_stepping_s'])}, {s(sleep['evicted_stepping_s'])}"
                " (SIGSTOP, sleep)", "–",
                all(_le(x["evicted_stepping_s"], x["goal_evicted_s"]) for x in (stop, sleep)),
            ))  # fmt: skip
        if one := st.get("1.0"):
            fast = st.get("0.1")
            out.append((
                "replicated step time, 1 s steps", f"≤ {STEP_GOAL_PCT:g} % over plain DDP",
                f"+{one['extra_pct']:g} % (+{one['extra_ms']:g} ms)"
                + (f"; +{fast['extra_pct']:g} % at 100 ms" if fast else ""),
                f"plain DDP {one['plain_ms']:g} ms", one["extra_pct"] <= STEP_GOAL_PCT,
            ))  # fmt: skip
    return out


def _failed(rep: Result | None, fault: str) -> int:
    """Replicated trials of `fault` that did not end well: an exit status, unequal weights."""
    ts = ((rep or {}).get("trials") or {}).get("faults", [])
    return sum(
        t["exit_status"] != 0 or t["params_max_diff"] > 1e-6 for t in ts if t["fault"] == fault
    )


def _where(r: Result | None, what: str) -> str:
    if r is None:
        return ""
    m = r.get("machine") or {}
    took = f" ({r['wall_s'] / 60:.0f} min)" if r.get("wall_s") else ""
    return f"{what} at load average {(m.get('loadavg_at_start') or ['?'])[0]} at the start{took}"


def restart_section(
    r: Result | None,
    rep: Result | None,
    ft: Result | None,
    quiet: Result | None = None,
    ray: Result | None = None,
) -> Lines:
    """`quiet`: the same restarts on a quiet machine (bench_restart.py, restart_quiet.json);
    `ray`: Ray Train's restart after a SIGSTOP (bench_torchft.py, ray_restart.json)."""
    out = ["## How soon training steps again, and what the healthy ranks lost", ""]
    if r is None and rep is None:
        return out + missing("restart")
    out += [
        "A rank of a 2-rank gloo job hangs (SIGSTOP: definitive; a sleep in its step: ambiguous,",
        "acted on after the patience: 90 s as shipped, 10 s for a replicated job) and the sidecar,",
        "on its shipped defaults, kills it. Without replicas something restarts every rank",
        "(`torchrun --max-restarts 1`; Ray Train's `FailureConfig`) from the last checkpoint",
        "(every 5 steps here): the steps since are done again. With replicas (`replicate` in the",
        "script, `trainprobe run --replicas 2`, one rank a group) the healthy group goes on in its",
        "own process and the evicted one steps again with a peer's state. Seconds from onset,",
        "medians (max).",
        "",
        *head("stack", "hang", "steps again", "killed", "work lost", "failed", "goal", ""),
    ]
    sources = [(x, where) for x, where in ((r, ""), (quiet, ", quiet machine")) if x is not None]
    for hang, (res, where) in ((h, src) for h in HANGS for src in sources):
        goal = restart_goal(res, hang)
        for k, g in stack_results(res, hang):
            x = g["summary"]
            out.append(row(
                f"{STACKS[k]}, torchrun{where}", HANGS[hang],
                f"every rank **{s(x['stepping_again_s_median'])}**"
                f" ({s(x['stepping_again_s_max'])})"
                if x["stepping_again_s_median"] is not None else "**none stepped again**",
                s(x["killed_s_median"]), f"{_n(x['steps_redone_median'])} steps, every rank",
                f"{x['failed_restarts']} of {x['trials']}", f"≤ {goal:g} s",
                yes(_le(x["stepping_again_s_median"], goal)),
            ))  # fmt: skip
    if x := ray_restart(ray, "stop"):
        goal = DEFINITIVE_GOAL_S["ray_train"]
        out.append(row(
            "plain loop, Ray Train", "SIGSTOP",
            f"every rank **{s(x['all_stepping_s'])}** ({s(x['all_stepping_max_s'])})"
            if x["all_stepping_s"] is not None else "**none stepped again**",
            s(x["killed_s"]), f"{_n(x['steps_redone'])} steps, every rank",
            f"{len(x['errors'])} of {x['trials']}", f"≤ {goal:g} s",
            yes(_le(x["all_stepping_s"], goal)),
        ))  # fmt: skip
    sleep_rs, sleep_src = ray_sleep(ft, ray)
    if r is not None and (rs := sleep_rs):
        goal, most, redone = (
            restart_goal(r, "sleep"),
            rs.get("all_stepping_max_s"),
            rs.get("steps_redone"),
        )
        out.append(row(
            "plain loop, Ray Train", "sleep",
            f"every rank **{s(rs['all_stepping_s'])}**" + (f" ({s(most)})" if most else ""),
            s(rs["killed_s"]) if rs.get("killed_s") else "–",
            f"{_n(redone)} steps, every rank" if redone is not None
            else "the steps since the checkpoint",
            f"{len(rs['errors'])} of {rs['trials']}", f"≤ {goal:g} s",
            yes(_le(rs["all_stepping_s"], goal)),
        ))  # fmt: skip
    faults = ((rep or {}).get("summary") or {}).get("faults", {})
    for hang, x in sorted(faults.items(), key=lambda kv: list(HANGS).index(kv[0])):
        ok = _le(x["survivor_resumed_s"], x["goal_survivor_s"]) and x["survivor_same_pid"]
        out.append(row(
            "replicated DDP loop, `trainprobe run`", HANGS.get(hang, hang),
            f"survivor **{s(x['survivor_resumed_s'])}**,"
            f" evicted replica {s(x['evicted_stepping_s'])}",
            "–", "none redone, same pid" if x["survivor_same_pid"] else "none redone",
            f"{_failed(rep, hang)} of {x['trials']}",
            f"≤ {x['goal_survivor_s']:g} s, ≤ {x['goal_evicted_s']:g} s",
            yes(ok and _le(x["evicted_stepping_s"], x["goal_evicted_s"])),
        ))  # fmt: skip
    if rep is not None and (st := rep["summary"]["steptime"]):
        paces = ", ".join(
            f"{x['replicated_ms']:g} against {x['plain_ms']:g} ms at {float(p):g} s steps"
            f" (+{x['extra_pct']:g} %)"
            for p, x in sorted(st.items(), key=lambda kv: -float(kv[0]))
        )
        out += [
            "",
            f"Step time, replicated (2 groups of 1 rank) against plain 2-rank DDP: {paces}.",
        ]
    failed = [
        f"{STACKS.get(k.split('/')[0], k)} ({x['failed_restarts']} of {x['trials']})"
        for k, g in (quiet or {}).get("stacks", {}).items()
        if (x := g["summary"])["failed_restarts"]
    ]
    if quiet is not None and failed:
        m = quiet.get("machine") or {}
        sw = ", ".join(f"{n} {m[n].split('+')[0]}" for n in ("torch", "transformers") if m.get(n))
        out += [
            "",
            f"Failed on the quiet machine ({sw}), after the kill: {', '.join(failed)};",
            "the result file's notes say why.",
        ]
    if r is not None and not ray_restart(ray, "stop"):
        goal = DEFINITIVE_GOAL_S["ray_train"]
        out += ["", f"Ray Train's restart after a SIGSTOP (goal ≤ {goal:g} s) has no result yet."]
    ray_rows = "rows" if r is not None and sleep_rs and sleep_src is ray else "SIGSTOP row"
    cmds = [
        *([command(r, "restart")] if r is not None else []),
        *([command(rep, "replicated")] if rep is not None else []),
        *(["# the quiet rows: " + command(quiet, "restart_quiet").split(" (")[0]] if quiet else []),
        *(
            [command(ft, "torchft") + "  # Ray Train's row"]
            if r is not None and sleep_src is ft and sleep_rs
            else []
        ),
        *([command(ray, "ray_restart") + f"  # Ray Train's {ray_rows}"] if ray else []),
    ]
    where = "; ".join(
        w for w in (_where(r, "the restarts"), _where(rep, "the replicated loop")) if w
    )
    if quiet is not None:
        m = quiet.get("machine") or {}
        where += f"; the quiet rows on {m.get('cpus')} CPUs{_where(quiet, '')}"
    ray_loads = [
        t["load"] for t in ((ray or {}).get("trials") or {}).get("restart", []) if "load" in t
    ]
    if ray_loads:
        where += f"; Ray Train's trials at load average {min(ray_loads):g} to {max(ray_loads):g}"
    return [
        *out, "", plot_ref("restart", "training steps again"), "",
        "```bash", *cmds, "```", "", f"<sub>Measured on 2 CPUs: {where}.</sub>", "",
    ]  # fmt: skip
