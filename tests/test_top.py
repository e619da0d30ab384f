"""``trainprobe top`` in a real terminal: tmux runs it against a live sidecar.

Three real gloo ranks train with ``--watch-ddp``; rank 1 then hangs (it sleeps
inside a step, its peers wait in the allreduce). The sidecar only observes
(no kill), so the hang lasts. ``trainprobe top`` runs in a tmux pane, typed
in with ``send-keys``; ``capture-pane`` must show rank 1 marked CULPRIT on a
red background, with red cells (its arrival lag), while the waiting ranks are
not marked; ``q`` ends it. Once in a wide pane, once in 80 x 24, where every
rank's row must still be whole.
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
@pytest.mark.parametrize("cols,rows", [(160, 40), (80, 24)])
def test_top_marks_the_hanging_rank_red_in_a_real_terminal(cols: int, rows: int) -> None:
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed (apt-get install tmux; make test does as root)")
    session = f"tp-top-{os.getpid()}-{cols}"
    with (
        sidecar("--on-hung", "observe", "--stall-timeout-s", "3") as sc,
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
                return screen if "CULPRIT" in line and RED_BG.search(line) else ""

            try:
                screen = wait_for(culprit_shown, 20, what="rank 1 marked CULPRIT in red")
            except AssertionError:
                raise AssertionError(f"the pane showed:\n{last[0]!r}") from None
            line = rank_line(screen, 1)
            assert RED_FG.search(line.split("CULPRIT", 1)[1]), "its lag cells are red"
            for peer in (0, 2):
                assert "CULPRIT" not in rank_line(screen, peer), screen
            assert "incidents:" in screen
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
