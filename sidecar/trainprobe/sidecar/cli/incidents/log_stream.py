"""Reading the incident log as a stream, in bounded memory, whatever it holds.

``trainprobe incidents`` and ``report`` read the sidecar's log and its
rotated files (oldest first) record by record: a line that is not a record,
or a record of an unexpected shape (:mod:`.record_shape`), is named in one
line and skipped, and every other record is still shown. Nothing grows with
the log: records are grouped into incident stories in a window of the log
(:data:`OPEN_BYTES` of record text, :data:`OPEN_STORIES` incidents), and a
story leaves the window, in log order, once its incident is that far behind.
The sidecar writes an incident's later records (decision, action, recovery)
within seconds or minutes of it, well inside the window.
"""

from __future__ import annotations

import errno
import json
import os
import resource
import stat
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from trainprobe.sidecar.cli.incidents.record_shape import shape_problem
from trainprobe.sidecar.cli.incidents.story import KINDS, IncidentStory
from trainprobe.sidecar.core.log_rotation import in_read_order, rotated_name

__all__ = [
    "MAX_LATER",
    "MAX_LINE_BYTES",
    "OPEN_BYTES",
    "OPEN_STORIES",
    "LogFile",
    "Warn",
    "job_names",
    "json_array",
    "log_files",
    "read_records",
    "shown",
    "stream_stories",
]

Warn = Callable[[str], None]

#: Longest line read as a record; a longer one is skipped unread (the sidecar's
#: largest, an incident over 10,000 ranks with their evidence, is ~2 MB).
MAX_LINE_BYTES = 16 * 1024 * 1024
#: Record text held while stories are open (Python holds ~5-10x in objects).
OPEN_BYTES = 4 * 1024 * 1024
#: Incidents held open at most.
OPEN_STORIES = 4096
#: Later records kept for one incident; more are counted in one warning.
MAX_LATER = 1000
#: Jobs whose names are gathered from a log at most (a log could name millions).
MAX_JOBS = 100_000
_CHUNK = 1024 * 1024
#: Times the set is opened while the sidecar rotates it (each takes well under 1 ms).
_SET_TRIES = 100
#: Descriptors left free when the set is longer than the process may open (the
#: reading and the command's own imports and output need some).
_SPARE_FDS = 32


class LogFile:
    """One file of the log's set, opened when the set was listed: read from the
    descriptor, it is the same file even if the writer has since renamed it.
    One that could not be opened has no descriptor and says why (``error``)."""

    def __init__(
        self, path: Path, fd: int, regular: bool, inode: tuple[int, int], error: str = ""
    ) -> None:
        self.path, self.fd, self.regular, self.inode = path, fd, regular, inode
        self.error = error
        #: Closes the descriptor (at once, or when the object goes).
        self.close: Callable[[], Any] = (
            weakref.finalize(self, os.close, fd) if fd >= 0 else (lambda: None)
        )

    def __repr__(self) -> str:
        return f"LogFile({str(self.path)!r})"


def log_files(path: Path) -> list[LogFile]:
    """The log and its rotated files, oldest first, each opened at once (FileNotFoundError
    if none is there, the first one's OSError if none can be opened). One that cannot
    be opened (a link loop, a socket, no permission), or past the descriptors this
    process may hold (the oldest), is named in one warning line when it is read.

    The sidecar may rotate while this runs (the log becomes ``.1``, ``.1`` becomes
    ``.2``...): a listing or an open mid-rotation can miss a file. The set is
    opened again until it is whole (numbered without a gap, each name still
    holding the file opened under it), so what is read is one run of the log, each
    record once. Held open, the files read the same however they are renamed after."""
    opened: list[LogFile] = []
    for _ in range(_SET_TRIES):
        for f in opened:  # the last try's, before this one opens them again
            f.close()
        opened, whole = _open_set(path)
        if whole and all(_same(f) for f in opened):
            break
    # else: rotating without pause, or a file of the set removed by hand: as it stands
    if not opened:
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(path))
    if all(f.fd < 0 for f in opened):  # nothing of it can be read: the log's own error
        raise next(f.raised for f in opened if isinstance(f, _Unread))
    return opened


def _open_set(path: Path) -> tuple[list[LogFile], bool]:
    """The set as listed now, oldest first, and whether it looked whole."""
    try:
        # A path with no name ('.', '/'): no file is its rotated one.
        names = os.listdir(path.parent) if path.name else []
    except OSError:  # a directory we may pass through but not list: the log alone
        names = []
    paths = [path.with_name(n) for n in in_read_order(path.name, names)] or [path]
    numbered = [p.name for p in paths[::-1] if p != path]  # .1, .2, ... if whole
    whole = numbered == [rotated_name(path.name, n) for n in range(1, len(numbered) + 1)]
    opened: list[LogFile] = []
    newest_first = paths[::-1]  # a reader comes for them
    for i, p in enumerate(newest_first):
        try:
            # Whoever can write the log's directory can put anything in its rotated
            # set: a FIFO would block a plain open (read as "not a regular file").
            fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            whole = False  # renamed between the listing and now
            continue
        except OSError as err:
            if err.errno in (errno.EMFILE, errno.ENFILE) and any(f.fd >= 0 for f in opened):
                # Descriptors are per process: the oldest files go unread, and
                # enough are given back for the reading itself.
                kept = [f for f in opened if f.fd >= 0]
                spare = kept[max(1, len(kept) - _SPARE_FDS) :]
                for f in spare:
                    f.close()
                opened = [f for f in opened if f not in spare]
                left = [f.path for f in spare] + newest_first[i:]
                opened.append(_too_many(left, err))
                break
            # A link loop, a socket, a file we may not read: named on reading.
            opened.append(_Unread(p, err))
            continue
        st = os.fstat(fd)
        opened.append(LogFile(p, fd, stat.S_ISREG(st.st_mode), (st.st_dev, st.st_ino)))
    return opened[::-1], whole


class _Unread(LogFile):
    """A file of the set that could not be opened: named when its turn comes."""

    def __init__(self, path: Path, err: OSError, error: str = "") -> None:
        super().__init__(path, -1, False, (0, 0), error or f"cannot read ({err.strerror}): skipped")
        self.raised = err


def _too_many(left: list[Path], err: OSError) -> LogFile:
    """The oldest files, past the descriptors this process may hold, as one line."""
    oldest, newest = left[-1].name, left[0].name
    span = oldest if len(left) == 1 else f"{oldest} to {newest}"
    return _Unread(
        left[-1],
        err,
        f"the {len(left)} oldest files of the set ({span}) not read: {err.strerror} "
        f"(ulimit -n {_fd_limit()}): skipped",
    )


def _fd_limit() -> str:
    try:
        return str(resource.getrlimit(resource.RLIMIT_NOFILE)[0])
    except (OSError, ValueError):
        return "?"


def _same(file: LogFile) -> bool:
    try:
        if file.fd < 0:  # not opened: the name is still there
            os.lstat(file.path)
            return True
        st = os.stat(file.path)
    except OSError:
        return False
    return (st.st_dev, st.st_ino) == file.inode


def _lines(file: LogFile, warn: Warn) -> Iterator[tuple[int, bytes]]:
    path = file.path
    if file.error:
        warn(f"{path}: {file.error}")
        return
    if not file.regular:
        warn(f"{path}: not a regular file: skipped")
        return
    # Through the descriptor itself: a dup could find none left (a long set).
    with open(file.fd, "rb", closefd=False) as f:
        f.seek(0)  # the set may be read twice (the job names, then the records)
        n = 0
        while True:
            try:
                raw = f.readline(MAX_LINE_BYTES + 1)
            except OSError as err:  # a member that fails as it is read (EIO)
                warn(f"{path}:{n + 1}: cannot read ({err.strerror}): the rest skipped")
                return
            if not raw:
                return
            n += 1
            if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
                while (more := f.readline(_CHUNK)) and not more.endswith(b"\n"):
                    pass
                warn(f"{path}:{n}: a line over {MAX_LINE_BYTES >> 20} MiB: skipped")
                continue
            yield n, raw


def read_records(files: Iterable[LogFile], warn: Warn) -> Iterator[tuple[dict[str, Any], int]]:
    """Each well-formed record of ``files`` in order, with its size in bytes."""
    for file in files:
        path = file.path
        for n, raw in _lines(file, warn):
            line = raw.decode("utf-8", errors="replace").strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as err:
                warn(
                    f"{path}:{n}: not a JSON record ({err.msg} at column {err.colno}; "
                    "a torn write?): skipped"
                )
                continue
            except (ValueError, RecursionError):  # nested past the stack; a 5,000-digit int
                warn(f"{path}:{n}: not a JSON record it can read: skipped")
                continue
            kind = rec.get("type") if isinstance(rec, dict) else None
            key = rec.get("id" if kind == "incident" else "incident_id") if kind else None
            if kind not in KINDS or not isinstance(key, str):
                warn(f"{path}:{n}: not an incident-log record: skipped")
                continue
            problem = shape_problem(rec)
            if problem is not None:
                warn(f"{path}:{n}: a {kind} record, but {problem}: skipped")
                continue
            yield rec, len(raw)


def stream_stories(
    records: Iterable[tuple[dict[str, Any], int]], warn: Warn
) -> Iterator[IncidentStory]:
    """Incidents in log order, each with its later records, as :func:`.incidents.stories`
    gives them, holding only the window of the log that is still open."""
    # id -> [story, record bytes held, later records skipped]
    open_: OrderedDict[str, list[Any]] = OrderedDict()
    held = 0
    for rec, size in records:
        if rec["type"] == "incident":
            if rec["id"] in open_:  # the first of an id is the incident, as stories() says
                continue
            open_[rec["id"]] = [IncidentStory(rec), size, 0]
            held += size
        elif (entry := open_.get(rec["incident_id"])) is not None:
            if len(entry[0].later) >= MAX_LATER:
                entry[2] += 1
                continue
            entry[0].later.append(rec)
            entry[1] += size
            held += size
        while open_ and (held > OPEN_BYTES or len(open_) > OPEN_STORIES):
            oldest = open_.popitem(last=False)[1]
            held -= oldest[1]
            yield _close(oldest, warn)
    for entry in open_.values():
        yield _close(entry, warn)


def _close(entry: list[Any], warn: Warn) -> IncidentStory:
    story, _, skipped = entry
    if skipped:
        warn(f"incident {story.id}: {skipped} later records past the first {MAX_LATER}: skipped")
    return story


def job_names(files: Iterable[LogFile]) -> dict[str, str]:
    """id -> name of the jobs the incidents of ``files`` name (the first non-empty
    name of each, as :func:`~trainprobe.sidecar.core.jobnames.names_of` says), read
    quietly (the pass that shows the records warns). Read to the end even past
    an id that ``--job`` gave: a job later in the log may have it for its name."""
    names: dict[str, str] = {}
    for rec, _ in read_records(files, lambda _: None):
        if rec["type"] != "incident":
            continue
        job, name = str(rec.get("job_id")), str(rec.get("job_name") or "")
        if job not in names and len(names) >= MAX_JOBS:
            continue
        if name and not names.get(job):
            names[job] = name
        else:
            names.setdefault(job, "")
    return names


def shown(
    stories: Iterable[IncidentStory], render: Callable[[IncidentStory], Any], warn: Warn
) -> Iterator[Any]:
    """``render(story)`` of each story; one that cannot be rendered is named and skipped
    (the shapes are checked on reading: this is the last guard against a traceback)."""
    for story in stories:
        try:
            out = render(story)
        except Exception as err:  # a record's fault: never the command's end
            warn(f"incident {story.id}: cannot be shown ({type(err).__name__}): skipped")
            continue
        yield out


def json_array(items: Iterable[Any]) -> Iterator[str]:
    """``json.dumps(list(items), indent=2)``, a piece at a time."""
    first = True
    for item in items:
        body = json.dumps(item, indent=2).replace("\n", "\n  ")
        yield ("[\n  " if first else ",\n  ") + body
        first = False
    yield "[]" if first else "\n]"
