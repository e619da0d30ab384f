"""No import circle anywhere in the product or its benchmarks.

A circle makes a module's meaning depend on which side is imported first, and
it hides a missing seam. The graph is read from the source's syntax trees, so
it sees every import: at module level, inside functions, and under
``TYPE_CHECKING`` (a type-only circle is still two modules that cannot be
understood apart). An import names the module it loads: ``from pkg import
mod`` is an edge to ``pkg.mod`` when that is a module, else to ``pkg``.
"""

from __future__ import annotations

import ast
import importlib
import re
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

#: (folder, the dotted name its files import as): the three namespace roots,
#: and bench/, whose scripts run with bench/ on sys.path.
TREES = [
    (ROOT / "proto" / "trainprobe" / "proto", "trainprobe.proto"),
    (ROOT / "hooks" / "trainprobe" / "hooks", "trainprobe.hooks"),
    (ROOT / "sidecar" / "trainprobe" / "sidecar", "trainprobe.sidecar"),
    (ROOT / "bench", ""),
]


def _modules() -> dict[str, tuple[Path, bool]]:
    """Dotted name -> (file, is a package's __init__)."""
    out: dict[str, tuple[Path, bool]] = {}
    for folder, prefix in TREES:
        for path in folder.rglob("*.py"):
            rel = path.relative_to(folder).with_suffix("")
            parts = [p for p in (prefix.split(".") if prefix else [])] + list(rel.parts)
            is_pkg = parts[-1] == "__init__"
            if is_pkg:
                parts = parts[:-1]
            if parts:
                out[".".join(parts)] = (path, is_pkg)
    return out


def _known(name: str, mods: dict[str, tuple[Path, bool]]) -> str | None:
    """``name`` or its longest prefix that is one of ours."""
    parts = name.split(".")
    while parts:
        cand = ".".join(parts)
        if cand in mods:
            return cand
        parts.pop()
    return None


def _imports(
    mod: str, path: Path, is_pkg: bool, mods: dict[str, tuple[Path, bool]]
) -> Iterator[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = mod if is_pkg else mod.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if (t := _known(alias.name, mods)) is not None:
                    yield t
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".") if package else []
                base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
                origin = ".".join(base + ([node.module] if node.module else []))
            else:
                origin = node.module or ""
            for alias in node.names:
                sub = f"{origin}.{alias.name}" if origin else alias.name
                t = sub if sub in mods else _known(origin, mods)
                if t is not None:
                    yield t


def import_graph() -> dict[str, set[str]]:
    mods = _modules()
    return {
        m: {t for t in _imports(m, p, pkg, mods) if t != m} for m, (p, pkg) in sorted(mods.items())
    }


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_the_graph_sees_the_product_and_bench() -> None:
    graph = import_graph()
    # The reader works: known edges are found, relative and absolute.
    assert "trainprobe.sidecar.core.session.model" in graph["trainprobe.sidecar.core.judge.rules"]
    assert "perfdoc.core" in graph["perfdoc.document"]
    assert (
        "trainprobe.sidecar.core.judge.rule_context"
        in graph["trainprobe.sidecar.core.judge.worker_rules"]
    )


def test_a_circle_is_found() -> None:
    # The finder itself, on a made-up graph: a test that cannot fail is a defect.
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_circle() -> None:
    found = cycles(import_graph())
    assert not found, "import circles:\n" + "\n".join(" -> ".join(c) for c in found)


#: The core's subpackages, in the one direction imports may run: each may
#: import the ones before it and the shared leaves at the top of ``core/``
#: (``text``, ``limits``, ...), never one after it; a leaf imports no
#: subpackage, and nothing in the core imports the rest of the product.
CORE = "trainprobe.sidecar.core"
LAYERS = ["session", "judge", "job", "incident", "hang", "ray"]
#: The most modules a subpackage of the core holds, its ``__init__`` aside.
MAX_MODULES = 12


def _unit(mod: str, subs: set[str]) -> str | None:
    """A core module's subpackage (``subs``), "" for the top of ``core/``,
    None outside the core."""
    if mod != CORE and not mod.startswith(CORE + "."):
        return None
    first = mod[len(CORE) + 1 :].split(".")[0] if mod != CORE else ""
    return first if first in subs else ""


def _subpackages(graph: dict[str, set[str]]) -> set[str]:
    """The core's subpackages: the folders its modules sit in."""
    names = set(graph) | {d for ds in graph.values() for d in ds}
    return {
        rest[0]
        for m in names
        if m.startswith(CORE + ".") and len(rest := m[len(CORE) + 1 :].split(".")) > 1
    }


def direction_violations(graph: dict[str, set[str]], layers: list[str]) -> list[str]:
    subs = _subpackages(graph)
    bad = []
    for mod, edges in sorted(graph.items()):
        unit = _unit(mod, subs)
        if unit is None:
            continue
        if unit and unit not in layers:
            bad.append(f"{mod}: its subpackage {unit} is not in LAYERS")
            continue
        for dep in sorted(edges):
            to = _unit(dep, subs)
            if to is None:
                bad.append(f"{mod} imports {dep}, outside the core")
            elif to in ("", unit):
                continue
            elif not unit or to not in layers or layers.index(to) > layers.index(unit):
                bad.append(f"{mod} imports {dep}: {unit or 'core/'} may not import {to}")
    return bad


def test_the_direction_check_finds_a_wrong_way_import() -> None:
    s, j = f"{CORE}.session.model", f"{CORE}.judge.rules"
    graph = {
        s: {j},  # session reaches up into judge
        j: {s, f"{CORE}.text"},  # allowed: down, and a leaf
        f"{CORE}.text": {j},  # a leaf reaches into a subpackage
        f"{CORE}.judge": {j},  # a facade is its subpackage's
        f"{CORE}.odd.thing": set(),  # a subpackage nobody declared
        f"{CORE}.limits": {"trainprobe.hooks.report.reporter"},
        "trainprobe.sidecar.server": {j},  # outside the core: not its rule
    }
    assert direction_violations(graph, ["session", "judge"]) == [
        f"{CORE}.limits imports trainprobe.hooks.report.reporter, outside the core",
        f"{CORE}.odd.thing: its subpackage odd is not in LAYERS",
        f"{s} imports {j}: session may not import judge",
        f"{CORE}.text imports {j}: core/ may not import judge",
    ]


def test_the_core_imports_one_way() -> None:
    graph = import_graph()
    assert direction_violations(graph, LAYERS) == []


def test_each_core_subpackage_is_declared_and_small() -> None:
    core = ROOT / "sidecar" / "trainprobe" / "sidecar" / "core"
    subs = {p.parent.name: p.parent for p in core.glob("*/__init__.py")}
    if not subs:
        pytest.skip("core/ is still one flat folder (tools/reshape_core.py splits it)")
    assert sorted(subs) == sorted(LAYERS)
    sizes = {
        name: len([p for p in d.glob("*.py") if p.name != "__init__.py"])
        for name, d in subs.items()
    }
    assert max(sizes.values()) <= MAX_MODULES, sizes


def test_each_core_facade_exports_exactly_what_it_names() -> None:
    # As httpx's exported-members test: __all__ is the public surface, each
    # name in it resolves, and the package offers nothing public beyond it.
    cut = (CORE, HOOKS, "trainprobe.sidecar.cli", "trainprobe.sidecar.otel")
    facades = [m for m, (_, pkg) in _modules().items() if pkg and m.startswith(cut)]
    assert CORE in facades and f"{HOOKS}.watch" in facades
    for name in facades:
        module = importlib.import_module(name)
        assert hasattr(module, "__all__"), f"{name} has no explicit __all__"
        exported = list(getattr(module, "__all__", []))
        assert len(set(exported)) == len(exported), name
        for attr in exported:
            assert getattr(module, attr) is not None, f"{name}.{attr}"
        public = {a for a in dir(module) if not a.startswith("_")}
        public -= {"TYPE_CHECKING", "annotations", "lazy_exports"}
        public = {a for a in public if not isinstance(getattr(module, a), types.ModuleType)}
        assert public == set(exported), (name, public ^ set(exported))


#: Packages cut into units, in the one direction imports may run: a unit is
#: a subpackage or one module at the package's top, and each may import the
#: units before it, never one after it; the package's ``__init__`` may import
#: any. In the hooks the user-facing modules (the hook, the framework
#: callbacks, torchft, Ray) stay at the top and the machinery sits in
#: subpackages; nothing of the hooks imports the sidecar.
HOOKS = "trainprobe.hooks"
UNITS = {
    HOOKS: [
        "_grpc_fork",
        "ray_wait",
        "watch",
        "startup",
        "report",
        "torchft",
        "replicated_optim",
        "replica",
        "liveness",
        "ray_train",
        "framework",
        "lightning",
        "transformers",
        "replicated_lightning",
        "replicated_transformers",
    ],
    "trainprobe.sidecar.cli": [
        "flags",
        "output",
        "extras",
        "status_text",
        "incidents",
        "top",
        "report",
        "run",
        "sidecar",
        "ctl",
    ],
    "trainprobe.sidecar.otel": ["traces", "metrics", "export", "telemetry"],
    "perfdoc": [
        "core",
        "plotting",
        "sections",
        "headlines",
        "figures",
        "figures_restart",
        "document",
    ],
}


def _unit_of(mod: str, package: str) -> str | None:
    """A module's unit in ``package``: its subpackage or top-level module, ""
    for the package's ``__init__``, None outside the package."""
    if mod == package:
        return ""
    if not mod.startswith(package + "."):
        return None
    return mod[len(package) + 1 :].split(".")[0]


def unit_violations(graph: dict[str, set[str]], package: str, layers: list[str]) -> list[str]:
    bad = []
    for mod, edges in sorted(graph.items()):
        unit = _unit_of(mod, package)
        if unit is None:
            continue
        if unit and unit not in layers:
            bad.append(f"{mod}: its unit {unit} is not in the package's layers")
            continue
        for dep in sorted(edges):
            if package == HOOKS and dep.startswith("trainprobe.sidecar"):
                bad.append(f"{mod} imports {dep}: the hooks may not import the sidecar")
                continue
            to = _unit_of(dep, package)
            if to is None or to == unit or unit == "":
                continue
            if to == "" or to not in layers or layers.index(to) > layers.index(unit):
                bad.append(f"{mod} imports {dep}: {unit} may not import {to or package}")
    return bad


def test_the_unit_check_finds_a_wrong_way_import() -> None:
    w, r, top = f"{HOOKS}.watch.steps", f"{HOOKS}.report.reporter", f"{HOOKS}.liveness"
    graph = {
        w: {r},  # watch reaches up into report
        r: {w, "trainprobe.proto.probe_pb2"},  # allowed: down, and the proto
        top: {r, w},  # allowed: the hook over its machinery
        f"{HOOKS}.report.messages": {top},  # machinery reaches up to the hook
        f"{HOOKS}.watch.gpu": {HOOKS},  # a module through the facade
        HOOKS: {top, w, r},  # the facade may import anything
        f"{HOOKS}.odd.thing": set(),  # a subpackage nobody declared
        f"{HOOKS}.report.target": {"trainprobe.sidecar.config"},
    }
    assert unit_violations(graph, HOOKS, ["watch", "report", "liveness"]) == [
        f"{HOOKS}.odd.thing: its unit odd is not in the package's layers",
        f"{HOOKS}.report.messages imports {top}: report may not import liveness",
        f"{HOOKS}.report.target imports trainprobe.sidecar.config: "
        "the hooks may not import the sidecar",
        f"{HOOKS}.watch.gpu imports {HOOKS}: watch may not import {HOOKS}",
        f"{w} imports {r}: watch may not import report",
    ]


@pytest.mark.parametrize("package", sorted(UNITS))
def test_each_cut_package_imports_one_way(package: str) -> None:
    assert unit_violations(import_graph(), package, UNITS[package]) == []


@pytest.mark.parametrize("package", sorted(UNITS))
def test_each_cut_package_is_declared_and_small(package: str) -> None:
    folder, prefix = next(
        (f, p) for f, p in TREES if package == p or package.startswith(p + ".") or not p
    )
    top = folder.joinpath(*package[len(prefix) :].lstrip(".").split("."))
    subs = sorted(p.parent for p in top.glob("*/__init__.py"))
    modules = sorted(p.stem for p in top.glob("*.py") if p.name != "__init__.py")
    assert sorted([d.name for d in subs] + modules) == sorted(UNITS[package])
    sizes = {d.name: len([p for p in d.rglob("*.py") if p.name != "__init__.py"]) for d in subs}
    sizes["(top)"] = len(modules)
    assert max(sizes.values()) <= MAX_MODULES, sizes


#: ``trainprobe.hooks.x[.attr]`` as README, docs/ and examples/ write it.
_DOC_PATH = re.compile(r"trainprobe\.hooks(?:\.[A-Za-z_]+)+")


def test_every_hooks_path_the_docs_name_is_real() -> None:
    # The paths users were told stay real modules (or a module's names) at
    # the top of hooks/; read from the syntax trees, so nothing is imported.
    mods = _modules()
    texts = [ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "examples").glob("*.py")]
    found = {m for t in texts for m in _DOC_PATH.findall(t.read_text(encoding="utf-8"))}
    assert "trainprobe.hooks.lightning" in found
    missing = []
    for dotted in sorted(found):
        mod = _known(dotted, mods)
        rest = dotted[len(mod) + 1 :].split(".") if mod and mod != dotted else []
        if mod is None or (mod != HOOKS and mod.count(".") != 2):
            missing.append(f"{dotted}: not a module at the top of hooks/")
        elif rest and rest[0] not in _defined(mods[mod][0]):
            missing.append(f"{dotted}: {mod} defines no {rest[0]}")
    assert not missing, missing


def _defined(path: Path) -> set[str]:
    """The names a module binds at its top level."""
    names: set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
    return names
