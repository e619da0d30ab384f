"""Every reference from one page of the docs to another leads somewhere.

In README.md and docs/*.md: a relative link's file exists and, for
``#anchor``, a heading of that page makes that anchor (as GitHub makes it);
a reference in words, ``docs/RAY.md, "Replicated jobs"``, names a heading of
that page; a file named by its path from the repository's root
(``bench/probes/x.py``, ``examples/y.py``, in code or not) exists. A page or
a script moved, or a heading renamed, breaks a reader's way silently
otherwise.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support import REPO

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
INLINE_CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.M)
#: ``docs/RAY.md, "Replicated jobs"`` or ``RAY.md ("Replicated jobs")``.
SECTION_REF = re.compile(r"\b((?:docs/)?[A-Z]+\.md)`?,?\s+\(?\"([^\"]+)\"")
#: A path from the repository's root, as a reader would type it: ``bench/x.py``.
#: (hooks/ and sidecar/ paths in the docs are short, from their package.)
REPO_PATH = re.compile(r"(?<![\w./-])((?:bench|deploy|docs|examples|tests|tools)/[\w./-]*\w)")


def anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped (``-``
    and ``_`` kept), spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def headings(page: Path) -> list[str]:
    return HEADING.findall(FENCE.sub("", page.read_text()))


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    out: set[str] = set()
    for heading in headings(page):
        base = anchor(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(page: Path) -> list[str]:
    """Relative link targets outside code (http:, https:, mailto: are not ours)."""
    text = INLINE_CODE.sub("", FENCE.sub("", page.read_text()))
    return [t for t in LINK.findall(text) if not re.match(r"[a-z][a-z0-9+.-]*:", t, re.I)]


def broken(page: Path, root: Path) -> list[str]:
    out = []
    for target in links(page):
        path, _, frag = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            out.append(f"{target}: no such file")
        elif frag and dest.suffix == ".md" and frag not in anchors(dest):
            out.append(f"{target}: no heading of {dest.name} makes #{frag}")
    for name, section in SECTION_REF.findall(FENCE.sub("", page.read_text())):
        top = name.startswith("docs/") or name == "README.md"
        dest = root / name if top else page.parent / name
        wanted = " ".join(section.split()).lower()
        if not dest.exists():
            out.append(f"{name}: no such file")
        elif not any(wanted in h.replace("`", "").lower() for h in headings(dest)):
            out.append(f'{name}, "{wanted}": no such heading')
    for path in REPO_PATH.findall(page.read_text()):
        if "*" not in path and not (root / path).exists():
            out.append(f"{path}: no such path")
    return out


def test_anchor_is_githubs() -> None:
    assert anchor("Before `init_process_group`: start-up hangs") == (
        "before-init_process_group-start-up-hangs"
    )
    assert anchor("The trainer's liveness probe") == "the-trainers-liveness-probe"


def test_a_broken_reference_is_found(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "B.md").write_text("# Two words\n\n## Again\n\n## Again\n")
    page = tmp_path / "docs" / "A.md"
    page.write_text(
        "# A\n[ok](B.md#two-words) [ok](B.md#again-1) [ok](#a) `[code](C.md)`\n"
        'B.md, "Two\n words" is fine.\n\n'
        "[gone](C.md) [bad](B.md#three-words) [bad](#b) [web](https://example.com)\n"
        'docs/B.md, "Three words" is not.\n'
        "`python bench/gone.py` moved; docs/B.md and bench/*.py are there.\n"
    )
    assert broken(page, tmp_path) == [
        "C.md: no such file",
        "B.md#three-words: no heading of B.md makes #three-words",
        "#b: no heading of A.md makes #b",
        'docs/B.md, "three words": no such heading',
        "bench/gone.py: no such path",
    ]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_reference_resolves(page: Path) -> None:
    assert not broken(page, REPO), f"{page.relative_to(REPO)}: {broken(page, REPO)}"
