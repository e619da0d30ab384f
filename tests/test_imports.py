"""The import structure: a core that imports alone, a CLI that does not load the
server, no import cycles, and a sidecar that leaves nothing open when it stops."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import threading
from pathlib import Path

from trainprobe.sidecar import SidecarThread, load_settings

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
        "from trainprobe.sidecar.core import evaluate, analyze\n"
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
    assert "trainprobe.sidecar.core.registry" in names and len(names) > 25
    out = run_python(
        BLOCKER
        + "import importlib\n"
        + "".join(f"importlib.import_module({n!r})\n" for n in names)
        + "import trainprobe.sidecar.core as core\n"
        + "for name in core.__all__:\n"
        + "    getattr(core, name)\n"
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
