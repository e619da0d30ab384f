"""What ``--job`` names: a job's id, or its human name (``Hello.job_name``).

Every command that takes ``--job`` resolves it here, over the jobs it knows
(the sidecar's sessions, or the incident log's records): an id that no other
job has for its name; else the one job of that name. Ids and names alike are
a client's word, so one that is several jobs' (a name two jobs share, or one
job's id that is another's name) is an error that lists their ids, since
showing the wrong job's incidents would be worse than asking: a client that
takes a real job's name for its id, or its id for its name, never stands in
for it. ``id:J`` means the id ``J`` alone, whatever names say. Every name
and id in a message is escaped. Pure: plain mappings in, an id or a
LookupError out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from trainprobe.sidecar.core.text import printable, short_list

__all__ = ["ID_PREFIX", "AmbiguousJob", "job_label", "names_of", "resolve_job"]

#: ``--job id:J``: the job whose id is ``J``, never a job named so.
ID_PREFIX = "id:"


class AmbiguousJob(LookupError):
    """A ``--job`` name that several jobs have."""


def resolve_job(ref: str, jobs: Mapping[str, str]) -> str:
    """The id ``ref`` stands for among ``jobs`` (id -> name, '' where unnamed).

    ``ref`` itself when it is an id no other job is named, when no job has
    that name, or when it is empty (callers then say that no such job is
    known, or mean every job); ``J`` for ``id:J``.
    """
    if ref.startswith(ID_PREFIX):
        return ref[len(ID_PREFIX) :]
    if not ref:
        return ref
    named = sorted(job for job, name in jobs.items() if name == ref and job != ref)
    if ref in jobs and named:
        ids = short_list([printable(j) for j in [ref, *named]], 8)
        raise AmbiguousJob(
            f"{printable(ref)!r} is a job's id and the name of {len(named)} other: {ids}; "
            f"pass --job {ID_PREFIX}{printable(ref)} for the job of that id, or another id"
        )
    if ref in jobs:
        return ref
    if len(named) == 1:
        return named[0]
    if named:
        raise AmbiguousJob(
            f"{len(named)} jobs are named {printable(ref)!r}: "
            f"{short_list([printable(j) for j in named], 8)}; pass one of these ids to --job"
        )
    return ref


def names_of(pairs: Iterable[tuple[str, str]]) -> dict[str, str]:
    """id -> name from (id, name) pairs, the first non-empty name of each id."""
    out: dict[str, str] = {}
    for job, name in pairs:
        if name and not out.get(job):
            out[job] = name
        else:
            out.setdefault(job, "")
    return out


def job_label(job: str, name: str) -> str:
    """``name (id J)``, or the id alone where the job has no other name; escaped."""
    if not name or name == job:
        return printable(job)
    return f"{printable(name)} (id {printable(job)})"
