"""The import structure: a core that imports alone, a CLI that does not load the
server, no import cycles, and a sidecar that leaves nothing open when it stops."""

from __future__ import annotations

import ast
import dataclasses
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

from trainprobe.sidecar import SidecarThread, load_settings
from trainprobe.sidecar.core.session.model import WorkerState

ROOT = Path(__file__).resolve().parents[1]
SIDECAR = ROOT / "sidecar" / "trainprobe" / "sidecar"


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )


def test_core_and_hooks_import_without_grpc_ray_or_opentelemetry() -> None:
    # None in sys.modules makes any import of that name fail, as if not installed.
    out = run_python(
        "import sys\n"
        "for m in ('grpc', 'ray', 'opentelemetry', 'torch'):\n"
        "    sys.modules[m] = None\n"
        "import trainprobe.sidecar.core, trainprobe.sidecar.config, trainprobe.hooks\n"
        "from trainprobe.sidecar.core.judge import evaluate, analyze\n"
        "from trainprobe.hooks import LivenessProbeHook\n"
        "print('ok')\n"
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


#: A meta-path finder that refuses the adapters' dependencies outright: their
#: import raises even where a module of theirs is already cached on disk.
BLOCKER = (
    "import sys\n"
    "BLOCKED = ('google', 'grpc', 'ray', 'opentelemetry')\n"
    "class Blocker:\n"
    "    def find_spec(self, name, path=None, target=None):\n"
    "        if name.split('.')[0] in BLOCKED:\n"
    "            raise ImportError(f'{name} is blocked: the core must not import it')\n"
    "sys.meta_path.insert(0, Blocker())\n"
)


def core_modules() -> list[str]:
    return sorted(
        _module_name(p) for p in (SIDECAR / "core").rglob("*.py") if p.name != "__init__.py"
    )


def test_the_blocker_blocks() -> None:
    out = run_python(BLOCKER + "import google.protobuf\n")
    assert out.returncode != 0 and "google is blocked" in out.stderr, out.stderr


def test_every_core_module_imports_with_protobuf_grpc_ray_and_otel_blocked() -> None:
    names = core_modules()
    assert "trainprobe.sidecar.core.session.registry" in names and len(names) > 25
    out = run_python(
        BLOCKER
        + "import importlib\n"
        + "".join(f"importlib.import_module({n!r})\n" for n in names)
        + "for pkg in ('session', 'judge', 'job', 'incident', 'hang', 'ray'):\n"
        + "    core = importlib.import_module('trainprobe.sidecar.core.' + pkg)\n"
        + "    for name in core.__all__:\n"
        + "        getattr(core, name)\n"
        + "leaked = sorted(m for m in sys.modules if m.split('.')[0] in BLOCKED\n"
        + "                or m.startswith('trainprobe.proto'))\n"
        + "print(leaked)\n"
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def _top_level_imports(path: Path) -> set[str]:
    """Top-level names of every module ``path`` imports (absolute imports only)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module)
    return found


def test_the_core_imports_only_the_standard_library_and_itself() -> None:
    for path in (SIDECAR / "core").rglob("*.py"):
        for mod in _top_level_imports(path):
            top = mod.split(".")[0]
            if top == "trainprobe":
                assert mod.startswith("trainprobe.sidecar.core"), f"{path.name} imports {mod}"
            else:
                assert top in sys.stdlib_module_names, f"{path.name} imports {mod}"


def test_creating_a_hook_without_grpc_says_so() -> None:
    out = run_python(
        "import sys\n"
        "sys.modules['grpc'] = None\n"
        "from trainprobe.hooks import LivenessProbeHook\n"
        "try:\n"
        "    LivenessProbeHook(start=False)\n"
        "except ImportError as err:\n"
        "    print('ImportError', 'grpc' in str(err))\n"
    )
    assert out.stdout.strip() == "ImportError True", out.stderr


def test_the_status_cli_does_not_load_the_server() -> None:
    out = run_python(
        "import sys\n"
        "import trainprobe.sidecar.cli.ctl\n"
        "loaded = [m for m in sys.modules if m.startswith('trainprobe.sidecar.')]\n"
        "print(sorted(loaded))\n"
        "assert 'trainprobe.sidecar.server' not in sys.modules\n"
        "assert 'opentelemetry' not in sys.modules and 'ray' not in sys.modules\n"
    )
    assert out.returncode == 0, out.stdout + out.stderr


def _module_name(path: Path) -> str:
    rel = path.relative_to(SIDECAR.parent.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path, name: str) -> set[str]:
    """Modules of trainprobe.sidecar that ``path`` imports, at any depth, except
    under ``if TYPE_CHECKING:`` (never executed)."""
    tree = ast.parse(path.read_text())
    is_pkg = path.name == "__init__.py"
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = name.split(".") if is_pkg else name.split(".")[:-1]
                pkg = pkg[: len(pkg) - node.level + 1]
                base = ".".join([*pkg, base] if base else pkg)
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return {m for m in found if m.startswith("trainprobe.sidecar")}


def import_graph() -> dict[str, set[str]]:
    files = {_module_name(p): p for p in SIDECAR.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        # Importing a.b.c runs a/__init__ and a/b/__init__ too, except those
        # already running because they contain the importing module.
        parts = name.split(".")
        ancestors = {".".join(parts[:i]) for i in range(1, len(parts) + 1)}
        edges = set()
        for m in _imports(path, name):
            mp = m.split(".")
            edges.update(".".join(mp[:i]) for i in range(2, len(mp) + 1))
        graph[name] = {e for e in edges if e in files} - ancestors
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def dfs(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (cycle := dfs(nxt)) is not None:
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := dfs(node)) is not None:
            return cycle
    return None


def test_the_import_graph_finds_a_planted_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}
    assert find_cycle(graph) == ["a", "b", "c", "a"]


def test_the_sidecar_has_no_import_cycles() -> None:
    graph = import_graph()
    assert len(graph) > 60  # every module was read
    assert "trainprobe.sidecar.act.killers" in graph["trainprobe.sidecar.ray.killer"]
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph) or [])


def test_the_core_imports_only_the_core() -> None:
    graph = import_graph()
    for name, edges in graph.items():
        if name.startswith("trainprobe.sidecar.core"):
            outside = {e for e in edges if not e.startswith("trainprobe.sidecar.core")}
            assert outside <= {"trainprobe.sidecar"}, f"{name} imports {outside}"


ARCHITECTURE = ROOT / "docs" / "ARCHITECTURE.md"
_ONLY = re.compile(r"\(only `([^`]+)`\)")


def _unit(module: str) -> str:
    """The map's name for a module: its folder (``core/``) or top-level file."""
    parts = module.split(".")
    if len(parts) == 2:
        return "__init__.py"
    if (SIDECAR / parts[2]).is_dir():
        return parts[2] + "/"
    return parts[2] + ".py"


def _module_of(path: str) -> str:
    return "trainprobe.sidecar." + path.removesuffix(".py").replace("/", ".")


def import_rules(text: str) -> dict[str, tuple[set[str], dict[str, str]]]:
    """The map's last column, per row: the units it may import, and those only
    one module of it may (``(only `cli/sidecar.py`)``)."""
    section = text.split("### The sidecar's map", 1)[1].split("\n## ", 1)[0]
    rules: dict[str, tuple[set[str], dict[str, str]]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if len(cells) != 3 or not cells[0].startswith("`"):
            continue
        allowed: set[str] = set()
        only: dict[str, str] = {}
        for clause in cells[2].split(";"):
            restricted = _ONLY.search(clause)
            names = re.findall(r"`([^`]+)`", re.sub(r"\([^)]*\)", "", clause))
            for name in names:
                if restricted:
                    only[name] = _module_of(restricted.group(1))
                else:
                    allowed.add(name)
        rules[cells[0].strip("`")] = (allowed, only)
    return rules


def table_violations(
    graph: dict[str, set[str]], rules: dict[str, tuple[set[str], dict[str, str]]]
) -> list[str]:
    bad = []
    for name, edges in sorted(graph.items()):
        unit = _unit(name)
        if unit not in rules:
            bad.append(f"{name}: its folder {unit} is not in the map")
            continue
        allowed, only = rules[unit]
        for edge in sorted(edges):
            target = _unit(edge)
            if edge == "trainprobe.sidecar" or target == unit or target in allowed:
                continue
            if only.get(target) == name:
                continue
            bad.append(f"{name} imports {edge}: the map lets {unit} import {sorted(allowed)}")
    return bad


def test_the_folder_map_in_the_docs_is_the_import_rule() -> None:
    rules = import_rules(ARCHITECTURE.read_text())
    assert rules["core/"] == ({"core/"}, {})
    assert rules["engine/"] == ({"core/", "tasks.py"}, {"act/": "trainprobe.sidecar.engine.ports"})
    graph = import_graph()
    assert table_violations(graph, rules) == []
    # Every row names something that exists.
    units = {_unit(m) for m in graph}
    assert set(rules) <= units, set(rules) - units


def test_the_map_check_finds_a_forbidden_import() -> None:
    rules = import_rules(ARCHITECTURE.read_text())
    graph = {
        "trainprobe.sidecar.core.judge.rules": {"trainprobe.sidecar.act.procs"},
        "trainprobe.sidecar.engine.loop": {"trainprobe.sidecar.act.actions"},
        "trainprobe.sidecar.engine.ports": {"trainprobe.sidecar.act.evidence"},
    }
    assert [v.split(":")[0] for v in table_violations(graph, rules)] == [
        "trainprobe.sidecar.core.judge.rules imports trainprobe.sidecar.act.procs",
        "trainprobe.sidecar.engine.loop imports trainprobe.sidecar.act.actions",
    ]


def test_the_engine_reaches_act_only_through_its_ports() -> None:
    graph = import_graph()
    engine = {n: e for n, e in graph.items() if n.startswith("trainprobe.sidecar.engine")}
    assert "trainprobe.sidecar.engine.runner" in engine
    reach = {n for n, e in engine.items() if any(m.startswith("trainprobe.sidecar.act") for m in e)}
    assert reach == {"trainprobe.sidecar.engine.ports"}


#: Assignments to an attribute named like a WorkerState field whose receiver is
#: not a WorkerState, by module: (receiver as written, what it really is).
NOT_SESSIONS = {
    "otel/traces/builder.py": {"wt": "WorkerTrace"},
    "relay/coalesce.py": {"acc": "the probe_pb2.Report being folded"},
    "relay/node.py": {"out.vouch": "probe_pb2.RelayItem.vouch"},
    "cli/top/model.py": {"row": "a top Row"},
}


def session_writes(path: Path, source: str, fields: set[str]) -> list[str]:
    """``receiver.field = ...`` statements that may write a WorkerState in ``path``."""
    rel = path.relative_to(SIDECAR).as_posix() if path.is_absolute() else str(path)
    exempt = NOT_SESSIONS.get(rel, {})
    found = []

    def visit(node: ast.AST, cls: str, fn: str) -> None:
        if isinstance(node, ast.ClassDef):
            cls = node.name
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            fn = node.name
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        flat = []
        for t in targets:
            flat += t.elts if isinstance(t, ast.Tuple) else [t]
        for t in flat:
            if not isinstance(t, ast.Attribute) or t.attr not in fields:
                continue
            receiver = ast.unparse(t.value)
            if receiver == "self" and (cls != "WorkerState" or fn == "__post_init__"):
                continue  # another class's own attribute, or a session being built
            if receiver in exempt:
                continue
            found.append(f"{rel}:{node.lineno}: {ast.unparse(t)}")
        for child in ast.iter_child_nodes(node):
            visit(child, cls, fn)

    visit(ast.parse(source), "", "")
    return found


#: The registry and its report path: the only writers of a WorkerState.
SESSION_WRITERS = {"core/session/registry.py", "core/session/fold.py"}


def test_only_the_registry_writes_a_worker_state() -> None:
    fields = {f.name for f in dataclasses.fields(WorkerState)}
    writes = []
    seen_exempt: set[tuple[str, str]] = set()
    for path in sorted(SIDECAR.rglob("*.py")):
        rel = path.relative_to(SIDECAR).as_posix()
        if rel in SESSION_WRITERS:
            continue
        source = path.read_text()
        writes += session_writes(path, source, fields)
        for receiver in NOT_SESSIONS.get(rel, {}):
            if re.search(rf"\b{re.escape(receiver)}\.\w+\s*(,|=[^=])", source):
                seen_exempt.add((rel, receiver))
    assert writes == []
    # No stale exemption: each still names an assignment that is there.
    assert seen_exempt == {(m, r) for m, rs in NOT_SESSIONS.items() for r in rs}


def test_the_session_write_check_finds_a_planted_write() -> None:
    fields = {f.name for f in dataclasses.fields(WorkerState)}
    source = (
        "def set_verdicts(states, worst):\n"
        "    for w in states:\n"
        "        w.verdict, w.verdict_rule = worst[w.key]\n"
        "    states[0].killed_by_us = True\n"
        "class Other:\n"
        "    def __init__(self):\n"
        "        self.verdict = None\n"
    )
    found = session_writes(Path("engine/planted.py"), source, fields)
    assert found == [
        "engine/planted.py:3: w.verdict",
        "engine/planted.py:3: w.verdict_rule",
        "engine/planted.py:4: states[0].killed_by_us",
    ]


def test_a_stopped_sidecar_closes_its_incident_log(tmp_path: Path) -> None:
    settings = load_settings(
        env={},
        cli={
            "listen": f"unix://{tmp_path}/s.sock",
            "state_dir": str(tmp_path),
            "telemetry": "false",
        },
    )
    before = set(os.listdir("/proc/self/fd"))
    side = SidecarThread(settings).start()
    assert side.sidecar is not None
    fd = side.sidecar.incident_log._fd
    side.stop()
    names = [t.name for t in threading.enumerate()]
    assert not any(n.startswith("trainprobe-incidents") for n in names), names
    assert str(fd) not in set(os.listdir("/proc/self/fd")) - before
