"""A paused job is not a hang when its ranks report through a relay node, too.

Real parts: an upstream sidecar and a node sidecar (``--relay-to``) as real
processes on private Unix sockets, real torch.distributed (gloo) ranks with
the hook connected to the node, and real SIGSTOP/SIGCONT to their pids. The
upstream cannot read a relayed rank's ``/proc``; the node reads its verified
workers' and sends up which of them are held. Under ``--hang-patience-s 0``
any judgement but "paused" would order a kill down at once, so 0 kills means
the upstream recognised the pause from the node's word.
"""

from __future__ import annotations

import os
import signal

import pytest

from tests.support import SidecarProcess, Workers, short_tmpdir, wait_for
from tests.test_pause_e2e import (
    FLAGS,
    TRAIN,
    freezer,
    hold_and_resume,
    stepping,
    stop_and_continue,
)

pytestmark = pytest.mark.slow


def _pair() -> tuple[SidecarProcess, SidecarProcess]:
    up = SidecarProcess(short_tmpdir("tpup-"), *FLAGS)
    node = SidecarProcess(short_tmpdir("tpnode-"), "--relay-to", up.target)
    return up, node


def test_a_relayed_job_sigstopped_for_15_s_then_continued_is_paused_and_never_killed() -> None:
    up, node = _pair()
    with up, node, Workers(2, node.target, short_tmpdir(), job_id="rpause", args=TRAIN) as w:
        stop_and_continue(up, w, "rpause", 15.0)
        dec = next(d for d in up.incidents("decision", job="rpause") if d["rule"] == "paused")
        assert "stopped by SIGSTOP" in dec["why"] and "ranks [0, 1]" in dec["why"], dec
        assert "killed worker pid" not in node.log_text()


def test_a_job_held_on_the_upstreams_host_and_through_a_node_is_paused() -> None:
    # Rank 0 reports to the upstream directly (its /proc is read there), rank 1
    # through the node (the node's word): one pause, both kinds of evidence.
    up, node = _pair()
    direct = {0: {"TRAINPROBE_TARGET": up.target}}
    with (
        up,
        node,
        Workers(2, node.target, short_tmpdir(), job_id="rmix", args=TRAIN, rank_env=direct) as w,
    ):
        stop_and_continue(up, w, "rmix", 10.0)
        dec = next(d for d in up.incidents("decision", job="rmix") if d["rule"] == "paused")
        assert "ranks [0, 1]" in dec["why"], dec
        # Rank 0 read here, from /proc, twice or more; rank 1 one sample, the node's word.
        assert dec["evidence"]["0"]["samples"] >= 2 and dec["evidence"]["1"]["samples"] == 1, dec


def test_a_relayed_job_frozen_by_a_cgroup_v2_freezer_is_paused_and_never_killed() -> None:
    # The freezer's word travels too (a frozen process reads S in /proc): the
    # node asks the freezer as an evidence round does. Needs a writable cgroupfs.
    up, node = _pair()
    with (
        freezer("v2") as (group, knob, value),
        up,
        node,
        Workers(2, node.target, short_tmpdir(), job_id="rfreeze", args=TRAIN) as w,
    ):
        for pid in w.pids:
            (group / "cgroup.procs").write_text(str(pid))
        hold_and_resume(
            up,
            w,
            "rfreeze",
            lambda: (group / knob).write_text(value),
            lambda: (group / knob).write_text("0"),
            10.0,
        )
        dec = next(d for d in up.incidents("decision", job="rfreeze") if d["rule"] == "paused")
        assert "frozen by a cgroup freezer" in dec["why"], dec


def test_one_relayed_rank_stopped_while_its_peer_waits_is_killed_as_stopped() -> None:
    up, node = _pair()
    with up, node, Workers(2, node.target, short_tmpdir(), job_id="rstop1", args=TRAIN) as w:
        stepping(w, 10)
        os.kill(w.pids[1], signal.SIGSTOP)
        action = wait_for(lambda: up.incidents("action", job="rstop1"), 120, what="the kill")[0]
        dec = next(d for d in up.incidents("decision", job="rstop1") if d.get("act"))
        assert dec["rule"] == "stopped" and dec["definitive"] is True, dec
        assert list(action["outcomes"]) == ["1"]
        assert action["outcomes"]["1"]["method"] == "relay-signal", action
        assert not any(d["rule"] == "paused" for d in up.incidents("decision", job="rstop1"))
        assert w.wait(30)[1] is not None  # the stopped rank is really gone
