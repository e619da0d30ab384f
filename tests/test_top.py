"""``trainprobe top`` in a real terminal: tmux runs it against a live sidecar.

Three real gloo ranks train with ``--watch-ddp``; rank 1 then hangs (it sleeps
inside a step, its peers wait in the allreduce). The sidecar watches it for a
16 s patience, then kills it. ``trainprobe top`` runs in a tmux pane, typed
in with ``send-keys``; ``capture-pane`` must show rank 1 marked CULPRIT on a
red background, with red cells (its arrival lag), the waiting ranks marked
WAITING (never SUSPECT), and the decision: the patience countdown with the
culprit's file:line, then rank 1 KILLED and the feed's ``HUNG -> KILLED``;
``q`` ends it. Once in 120 x 40, once in 80 x 24, where every rank's row must
still be whole and the file:line visible.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import time

import pytest

from tests.support import PYTHON, Workers, child_env, short_tmpdir, sidecar, wait_for

pytestmark = pytest.mark.slow

#: An SGR sequence that sets a red background (41) or red foreground (31).
RED_BG = re.compile(r"\x1b\[(?:[0-9]+;)*41(?:;[0-9]+)*m")
RED_FG = re.compile(r"\x1b\[(?:[0-9]+;)*31(?:;[0-9]+)*m")


def tmux(*args: str) -> str:
    return subprocess.run(
        ["tmux", *args], capture_output=True, text=True, timeout=30, check=True
    ).stdout


def rank_line(screen: str, rank: int) -> str:
    """The table row of ``rank`` (escape sequences kept)."""
    plain = re.compile(r"\x1b\[[0-9;]*m")
    for line in screen.splitlines():
        cols = plain.sub("", line).replace("│", " ").split()
        if len(cols) >= 2 and cols[0] == str(rank) and cols[1].isdigit():
            return line
    return ""


@pytest.mark.timeout(240)
@pytest.mark.parametrize("cols,rows", [(120, 40), (80, 24)])
def test_top_marks_the_hanging_rank_red_in_a_real_terminal(cols: int, rows: int) -> None:
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed (apt-get install tmux; make test does as root)")
    session = f"tp-top-{os.getpid()}-{cols}"
    with (
        sidecar("--stall-timeout-s", "3", "--hang-patience-s", "16") as sc,
        Workers(
            3,
            sc.target,
            short_tmpdir(),
            job_id="top",
            args=[
                "--steps",
                "100000",
                "--step-s",
                "0.05",
                "--interval-ms",
                "200",
                "--watch-ddp",
                "--hang-rank",
                "1",
                "--hang-at",
                "25",
            ],
        ),
    ):
        env = child_env(TERM="xterm-256color")
        tmux(
            "new-session", "-d", "-s", session, "-x", str(cols), "-y", str(rows),
            "-e", f"PATH={env['PATH']}", "bash --norc --noprofile",
        )  # fmt: skip
        try:
            cmd = [PYTHON, "-m", "trainprobe.sidecar.cli.ctl", "top", "--target", sc.target]
            cmd += ["--interval-s", "0.5"]
            tmux("send-keys", "-t", session, "TERM=xterm-256color " + shlex.join(cmd), "Enter")
            wait_for(
                lambda: "RECENT LAG" in tmux("capture-pane", "-p", "-t", session), 60, what="top"
            )
            sc.wait_incident(lambda r: r["verdict"] == "HUNG", timeout_s=90)

            last = [""]

            def culprit_shown() -> str:
                screen = last[0] = tmux("capture-pane", "-e", "-p", "-t", session)
                line = rank_line(screen, 1)
                plain = re.sub(r"\x1b\[[0-9;]*m", "", screen)
                countdown = re.search(r"HUNG\? \d+ s of 16 s patience", plain)
                # The culprit's file:line, even where the countdown wraps at 80 columns.
                place = "ddp_worker.py:" in plain.replace("\n", "")
                waiting = all("WAITING" in rank_line(screen, peer) for peer in (0, 2))
                shown = "CULPRIT" in line and RED_BG.search(line) and countdown and place
                return screen if shown and waiting else ""

            try:
                screen = wait_for(
                    culprit_shown, 25, what="rank 1 CULPRIT in red, the countdown, peers WAITING"
                )
            except AssertionError:
                raise AssertionError(f"the pane showed:\n{last[0]!r}") from None
            line = rank_line(screen, 1)
            assert RED_FG.search(line.split("CULPRIT", 1)[1]), "its lag cells are red"
            for peer in (0, 2):
                peer_line = rank_line(screen, peer)
                assert "CULPRIT" not in peer_line and "SUSPECT" not in peer_line, screen
            assert "incidents:" in screen

            # The feed keeps its last 8 lines: the peers' changes after the kill may
            # push the transition out before a loaded machine captures again.
            said = [False]

            def killed_shown() -> str:
                screen = last[0] = tmux("capture-pane", "-p", "-t", session)
                said[0] = said[0] or "rank 1: HUNG -> KILLED" in screen
                return screen if "KILLED" in rank_line(screen, 1) and said[0] else ""

            try:
                after = wait_for(killed_shown, 40, what="rank 1 KILLED, HUNG -> KILLED in the feed")
            except AssertionError:
                raise AssertionError(f"the pane showed:\n{last[0]!r}") from None
            assert "vanished" not in rank_line(after, 1), after
            assert re.search(r"KILLED rank 1 by \w+", after), after
            # Readable at any size: every rank's row whole, with its step and verdict,
            # and the table's head on the screen.
            plain = re.sub(r"\x1b\[[0-9;]*m", "", screen)
            assert "RANK" in plain and "VERDICT" in plain, plain
            for rank in (0, 1, 2):
                cells = re.sub(r"\x1b\[[0-9;]*m", "", rank_line(screen, rank)).split()
                assert cells[0] == str(rank) and cells[1].isdigit() and len(cells) >= 5, plain
                assert "…" not in " ".join(cells[:5]), plain
            assert max(len(line) for line in plain.splitlines()) <= cols
            tmux("send-keys", "-t", session, "q")
            wait_for(
                lambda: (
                    tmux("display", "-p", "-t", session, "#{pane_current_command}").strip()
                    == "bash"
                ),
                15,
                what="top to quit on q",
            )
        finally:
            subprocess.run(["tmux", "kill-session", "-t", session], timeout=30, check=False)
            time.sleep(0.1)
