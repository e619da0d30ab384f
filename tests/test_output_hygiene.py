"""A client's strings reach an operator's terminal, tables and logs escaped.

Two real gloo ranks (the real hook) report under a job id built to attack a
terminal: an ANSI colour, a BEL, a newline followed by a forged status row,
rich markup (``[/]``) and characters that break naive JSON. Rank 1 hangs
inside a step; the sidecar only observes, so the hang lasts while
``status``, ``diagnose``, ``top``, ``incidents``, the incident log and the
sidecar's own log are read.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import support
from tests.support import SidecarProcess, Workers, short_tmpdir

pytestmark = pytest.mark.slow

FORGED = "0 99999 4242 OK forged"
EVIL = f'[/]evil\x1b[31m\x07\n{FORGED}"}}{{\\[bold]x<i>'
#: What a terminal must never get from the client: ESC, BEL, any other control.
HANG = ("--hang-rank", "1", "--hang-at", "15")
RAW = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


ctl = functools.partial(support.ctl, COLUMNS="100")


def assert_clean(text: str, what: str) -> None:
    bad = RAW.search(text)
    assert bad is None, f"{what} has a raw {bad.group()!r}:\n{text!r}"
    for line in text.splitlines():
        assert not line.lstrip().startswith(FORGED), f"{what}: a forged line:\n{text}"


@pytest.fixture(scope="module")
def hung() -> Iterator[SidecarProcess]:
    work = short_tmpdir()
    sc = SidecarProcess(work, "--on-hung", "observe", "--stall-timeout-s", "3")
    with (
        sc,
        Workers(
            2,
            sc.target,
            work,
            job_id=EVIL,
            args=[*("--steps", "100000", "--step-s", "0.05", "--watch-ddp"), *HANG],
        ),
    ):
        sc.wait_incident(lambda r: r["verdict"] == "HUNG", timeout_s=120)
        yield sc


def test_status_escapes_the_job_id_and_no_row_is_forged(hung: SidecarProcess) -> None:
    for flags in ((), ("--wide",)):
        r = ctl("status", "--target", hung.target, *flags)
        assert r.returncode == 0, r.stderr
        assert_clean(r.stdout, f"status {flags}")
        assert "[/]evil\\x1b[31m\\x07\\n0 99999" in r.stdout
        # Who is at fault and who waits, from the job's diagnosis, on its own line.
        said = "straggler: culprits [1], waiting [0]"
        assert any(x.endswith(said) for x in r.stdout.splitlines()), r.stdout
        if not flags:  # every row fits 100 columns; only the job's own line is its whole id
            assert all(len(x) <= 100 for x in r.stdout.splitlines() if not x.startswith("job "))
    as_json = ctl("status", "--json", "--target", hung.target)
    assert_clean(as_json.stdout, "status --json")
    jobs = {w["jobId"] for w in json.loads(as_json.stdout)["workers"]}
    assert jobs == {EVIL}  # JSON carries the real value, escaped by JSON itself


def test_diagnose_escapes_text_and_keeps_json_whole(hung: SidecarProcess) -> None:
    r = ctl("diagnose", "--target", hung.target)
    assert r.returncode == 0, r.stderr
    assert_clean(r.stdout, "diagnose")
    assert "rank 1" in r.stdout
    as_json = ctl("diagnose", "--json", "--target", hung.target)
    assert as_json.returncode == 0, as_json.stderr
    assert_clean(as_json.stdout, "diagnose --json")
    assert json.loads(as_json.stdout)["job_id"] == EVIL


def test_top_shows_markup_literally_and_does_not_crash(hung: SidecarProcess) -> None:
    r = ctl("top", "--once", "--target", hung.target)
    assert r.returncode == 0, r.stderr
    assert "MarkupError" not in r.stderr
    assert_clean(r.stdout, "top")
    assert "[/]evil" in r.stdout  # markup shown as text, not parsed


def test_incident_log_and_sidecar_log_stay_one_record_a_line(hung: SidecarProcess) -> None:
    raw = hung.incident_log.read_bytes().decode()
    assert_clean(raw, "the incident log")
    records = [json.loads(line) for line in raw.splitlines()]  # every line whole JSON
    assert any(r.get("job_id") == EVIL for r in records if r["type"] == "incident")
    log = hung.log_text()
    assert "incident " in log
    assert_clean(log, "the sidecar's log")
    assert "evil\\x1b[31m\\x07\\n" in log


def test_incidents_command_escapes_what_it_reads(hung: SidecarProcess) -> None:
    for flags in ((), ("--job", EVIL)):
        r = ctl("incidents", "--log", str(hung.incident_log), *flags)
        assert r.returncode == 0, r.stderr
        assert_clean(r.stdout, f"incidents {flags}")
        assert "HUNG" in r.stdout
    (inc,) = [x for x in hung.incidents() if x["verdict"] == "HUNG"][:1]
    one = ctl("incidents", inc["id"], "--log", str(hung.incident_log))
    assert one.returncode == 0, one.stderr
    assert_clean(one.stdout, "incidents ID")
    as_json = ctl("incidents", "--json", "--log", str(hung.incident_log))
    assert {i["job_id"] for i in json.loads(as_json.stdout)} == {EVIL}


def test_report_page_escapes_the_job_id(hung: SidecarProcess, tmp_path: Path) -> None:
    out = tmp_path / "report"
    r = ctl(
        "report", "--target", hung.target, "--job", EVIL, "--log", str(hung.incident_log),
        "--out", str(out), "--watch-s", "1", "--interval-s", "0.5",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert_clean(r.stdout, "report")
    page = (out / "report.html").read_text()
    assert_clean(page, "the report page")
    assert "<i>" not in page and "x&lt;i&gt;" in page  # HTML-escaped after printable()
