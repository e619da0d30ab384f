"""``--job`` takes a job's id or its name: one that is several jobs' is an error."""

from __future__ import annotations

import pytest

from trainprobe.sidecar.core.jobnames import AmbiguousJob, job_label, names_of, resolve_job

JOBS = {
    "a1b2": "lit_hang.py 2026-12-06 05:58:44",
    "c3d4": "twin",
    "e5f6": "twin",
    "twin-id": "a1b2",  # a name that is another job's id
    "g7": "",
}


def test_an_id_is_itself_and_a_unique_name_its_id() -> None:
    assert resolve_job("c3d4", JOBS) == "c3d4"
    assert resolve_job("lit_hang.py 2026-12-06 05:58:44", JOBS) == "a1b2"


def test_an_id_that_another_job_has_for_its_name_is_an_error_and_id_prefix_picks_it() -> None:
    # Both are a client's word: a job named with another's id never hides it, nor
    # stands in for it; the operator is asked, and id:J means the id alone.
    with pytest.raises(AmbiguousJob, match=r"'a1b2' is a job's id .*\['a1b2', 'twin-id'\]"):
        resolve_job("a1b2", JOBS)
    assert resolve_job("id:a1b2", JOBS) == "a1b2"
    assert resolve_job("id:twin", JOBS) == "twin"  # no such id: the caller says so


def test_a_shared_name_is_an_error_that_lists_the_ids() -> None:
    with pytest.raises(AmbiguousJob, match=r"2 jobs are named 'twin': \['c3d4', 'e5f6'\]"):
        resolve_job("twin", JOBS)


def test_a_hostile_shared_name_is_escaped_in_the_error() -> None:
    jobs = {"x\x1b[31m": "n\x1b]0;", "y": "n\x1b]0;"}
    with pytest.raises(LookupError) as err:
        resolve_job("n\x1b]0;", jobs)
    assert "\x1b" not in str(err.value) and "\\x1b" in str(err.value)


def test_an_unknown_reference_comes_back_as_is() -> None:
    assert resolve_job("nope", JOBS) == "nope"
    assert resolve_job("", JOBS) == ""


def test_names_and_labels() -> None:
    assert names_of([("j", ""), ("j", "name"), ("k", "")]) == {"j": "name", "k": ""}
    assert job_label("j", "name") == "name (id j)"
    assert job_label("j", "") == "j" and job_label("j", "j") == "j"
    assert job_label("j\n", "n\x1b") == "n\\x1b (id j\\n)"
