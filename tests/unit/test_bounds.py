"""Bounds on what a client can make the sidecar hold (docs/SECURITY.md, "Bounds").

Pure core: the registry and the validators, with a hand-driven clock.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.core_builders import hello, report
from trainprobe.sidecar.core.limits import (
    MAX_ID_LEN,
    MAX_LABEL_KEY_LEN,
    MAX_LABEL_VALUE_LEN,
    MAX_LABELS,
    MAX_RECENT,
)
from trainprobe.sidecar.core.session import RayIds, Registry, RegistryError, ValidationError

T0 = 100.0


def _refused(h: object) -> str:
    with pytest.raises(RegistryError) as err:
        Registry().open(h, T0)  # type: ignore[arg-type]
    assert err.value.code == "INVALID_ARGUMENT"
    return str(err.value)


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("actor_id", "a" * (MAX_ID_LEN + 1), f"ray.actor_id is {MAX_ID_LEN + 1} characters"),
        ("job_id", "j" * 4_000_000, "ray.job_id is 4000000 characters"),
        ("node_id", "n" * (MAX_ID_LEN + 1), "ray.node_id"),
        ("worker_id", "w" * (MAX_ID_LEN + 1), "ray.worker_id"),
        ("run_name", "r" * (MAX_ID_LEN + 1), "ray.trial_or_run_name"),
    ],
)
def test_an_oversized_ray_id_is_refused_naming_field_and_limit(
    field: str, value: str, words: str
) -> None:
    message = _refused(replace(hello(), ray=RayIds(**{field: value})))
    assert words in message and f"at most {MAX_ID_LEN}" in message


def test_labels_are_bounded_in_count_key_and_value() -> None:
    too_many = {f"k{i}": "v" for i in range(MAX_LABELS + 1)}
    assert f"at most {MAX_LABELS}" in _refused(replace(hello(), labels=too_many))
    long_key = {"k" * (MAX_LABEL_KEY_LEN + 1): "v"}
    assert f"1..{MAX_LABEL_KEY_LEN}" in _refused(replace(hello(), labels=long_key))
    long_value = {"team": "v" * 3_900_000}
    msg = _refused(replace(hello(), labels=long_value))
    assert "labels['team'] is 3900000 characters" in msg and str(MAX_LABEL_VALUE_LEN) in msg
    # At the limits, accepted.
    ok = {f"{i:0{MAX_LABEL_KEY_LEN}d}": "v" * MAX_LABEL_VALUE_LEN for i in range(MAX_LABELS)}
    Registry().open(replace(hello(), labels=ok), T0)


def test_recent_steps_beyond_the_limit_are_refused() -> None:
    reg = Registry()
    w = reg.open(hello(), T0)
    n = MAX_RECENT + 1
    with pytest.raises(ValidationError, match=f"{n} recent steps; at most {MAX_RECENT}"):
        reg.apply(w, report(T0, step=n, durations=(0.01,) * n), T0)


def test_ended_sessions_are_evicted_oldest_first_beyond_their_bound() -> None:
    reg = Registry(max_sessions=100, max_ended=3)
    for i in range(10):
        w = reg.open(hello(job=f"j{i}"), T0 + i)
        reg.close(w, w.generation, "vanished", T0 + i, pid_alive=False)
    assert sorted(w.hello.job_id for w in reg) == ["j7", "j8", "j9"]
    assert reg.evicted == 7


def test_a_full_registry_evicts_an_ended_session_then_refuses() -> None:
    reg = Registry(max_sessions=3, max_ended=10)
    ended = reg.open(hello(job="ended"), T0)
    reg.close(ended, ended.generation, "goodbye", T0, pid_alive=None)
    live = [reg.open(hello(job=f"live{i}"), T0) for i in range(2)]
    reg.open(hello(job="third"), T0 + 1)  # room made by evicting the ended one
    assert reg.get(ended.key) is None and len(reg) == 3
    with pytest.raises(RegistryError) as err:
        reg.open(hello(job="fourth"), T0 + 2)
    assert err.value.code == "RESOURCE_EXHAUSTED" and "MAX_SESSIONS=3" in str(err.value)
    assert all(reg.get(w.key) is w for w in live)  # no live session was dropped


def test_a_resumed_session_is_no_longer_counted_as_ended() -> None:
    reg = Registry(max_sessions=100, max_ended=1)
    a = reg.open(hello(job="a", pid=10), T0)
    reg.close(a, a.generation, "vanished", T0, pid_alive=True)
    assert reg.open(hello(job="a", pid=10), T0 + 1) is a  # the same process is back
    b = reg.open(hello(job="b"), T0 + 2)
    reg.close(b, b.generation, "vanished", T0 + 2, pid_alive=False)
    assert reg.get(a.key) is a and reg.get(b.key) is b  # a was live, so nothing evicted


def test_a_diagnosis_over_its_bound_is_cut_and_says_so() -> None:
    import json

    from trainprobe.sidecar.core.limits import MAX_DIAGNOSE_CHARS
    from trainprobe.sidecar.queries import bounded_diagnosis

    small = bounded_diagnosis("j", "text", '{"a": 1}')
    assert (small.text, small.json, small.truncated_chars) == ("text", '{"a": 1}', 0)
    text = "t" * (MAX_DIAGNOSE_CHARS + 10)
    doc = json.dumps({"ranks": ["r" * 100] * (MAX_DIAGNOSE_CHARS // 100)})
    reply = bounded_diagnosis("j", text, doc)
    assert len(reply.text) < MAX_DIAGNOSE_CHARS + 100 and "10 characters cut" in reply.text
    cut = json.loads(reply.json)  # still a JSON document, and it says why it is short
    assert cut["truncated"] is True and cut["job_id"] == "j"
    assert reply.truncated_chars == 10 + len(doc)
    assert reply.ByteSize() < 2 * MAX_DIAGNOSE_CHARS + 1000
