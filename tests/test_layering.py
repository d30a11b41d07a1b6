"""The import arrows of ../shared/DESIGN.md, read from every import statement of fedsim/, edge/, server/, dashboard/.

Every ``import`` and ``from ... import`` counts, at module level or inside a function (a lazy import is still an
arrow). Relative imports are resolved against their package. Where a rule is about what ends up installed on a
device (the edge must not need torch), the check follows module-level imports transitively, parent packages'
``__init__`` included, since importing ``a.b.c`` runs ``a/__init__.py`` and ``a/b/__init__.py`` first.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("fedsim", "edge", "server", "dashboard")
# what an edge device never runs: the cloud service, the trainer, the run store, the simulator, the dashboard
EDGE_FORBIDDEN = ("server", "dashboard", "fedsim.split.trainer", "fedsim.runstore", "fedsim.sim", "fedsim.cli")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@cache
def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            found[_module_name(path)] = path
    return found


def _resolve(module: str, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    is_package = modules()[module].name == "__init__.py"
    base = module.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _imported(module: str, nodes: Iterable[ast.AST]) -> set[str]:
    """What the import statements among ``nodes`` name; ``from a import b`` counts ``a.b`` too when that is a
    module of ours."""
    found: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(module, node)
            found.add(target)
            found.update(f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in modules())
    return found


@cache
def imports(module: str, top_level_only: bool = False) -> frozenset[str]:
    """Modules ``module`` imports (at module level only, ``if TYPE_CHECKING:`` blocks left out, with
    ``top_level_only``)."""
    tree = ast.parse(modules()[module].read_text(encoding="utf-8"))
    return frozenset(_imported(module, tree.body if top_level_only else ast.walk(tree)))


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _parents(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


def loaded_by(module: str) -> set[str]:
    """Every module (ours or third-party, top name) that importing ``module`` runs, via module-level imports."""
    seen: set[str] = set()
    todo = _parents(module)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        if name in modules():
            for target in imports(name, top_level_only=True):
                todo.extend(_parents(target) if target.split(".")[0] in PACKAGES else [target.split(".")[0]])
    return seen


def _violations(source_prefix: str, forbidden: tuple[str, ...]) -> list[str]:
    return sorted(
        f"{module} imports {target}"
        for module in modules()
        if _within(module, source_prefix)
        for target in imports(module)
        if any(_within(target, f) for f in forbidden)
    )


def test_edge_never_imports_the_server_the_trainer_or_the_run_store() -> None:
    assert _violations("edge", EDGE_FORBIDDEN) == []
    for module in modules():
        if _within(module, "edge"):
            loaded = loaded_by(module)
            bad = sorted(m for m in loaded if any(_within(m, f) for f in EDGE_FORBIDDEN))
            assert bad == [], f"importing {module} runs {bad}"


def test_the_edge_runtime_loads_no_torch() -> None:
    """`fedsim edge run` with an exported bottom needs none of torch, transformers, streamlit, flwr or plotly."""
    heavy = {"torch", "transformers", "streamlit", "flwr", "plotly", "peft", "safetensors", "sklearn"}
    for module in ("edge.client", "edge.onnx_bottom", "edge.run", "fedsim.cli", "fedsim.cli.split"):
        assert module in modules(), module
        assert sorted(loaded_by(module) & heavy) == [], module


def test_only_the_command_line_imports_edge_server_or_dashboard() -> None:
    for outer in ("edge", "server", "dashboard"):
        offenders = [v for v in _violations("fedsim", (outer,)) if not _within(v.split(" imports ")[0], "fedsim.cli")]
        offenders += [v for other in PACKAGES if other not in ("fedsim", outer) for v in _violations(other, (outer,))]
        assert offenders == [], outer


def test_the_command_line_imports_edge_server_and_dashboard_lazily() -> None:
    for module in modules():
        if _within(module, "fedsim.cli"):
            eager = [
                t for t in imports(module, top_level_only=True) if t.split(".")[0] in ("edge", "server", "dashboard")
            ]
            assert eager == [], module


def test_algorithms_never_import_sim() -> None:
    assert _violations("fedsim.algorithms", ("fedsim.sim",)) == []


def test_the_dashboard_reads_the_run_store_and_nothing_of_sim_or_split() -> None:
    fedsim_targets = {
        target
        for module in modules()
        if _within(module, "dashboard")
        for target in imports(module)
        if _within(target, "fedsim")
    }
    assert fedsim_targets <= {"fedsim", "fedsim.runstore"}, sorted(fedsim_targets)


def subpackage(module: str) -> str:
    """``fedsim.sim.rounds.engine`` -> ``fedsim.sim``; a module directly in fedsim is its own node."""
    return ".".join(module.split(".")[:2])


def test_no_import_cycle_between_fedsim_subpackages() -> None:
    graph: dict[str, set[str]] = {}
    for module in modules():
        if not _within(module, "fedsim") or module == "fedsim":
            continue
        source = subpackage(module)
        for target in imports(module):
            if _within(target, "fedsim") and target != "fedsim" and subpackage(target) != source:
                graph.setdefault(source, set()).add(subpackage(target))
    cycle = _find_cycle(graph)
    assert cycle is None, " -> ".join(cycle or [])


def _find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)) is not None:
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)) is not None:
            return found
    return None


def test_the_checker_sees_a_cycle_and_a_lazy_import() -> None:
    """The rules above can fail: a two-node cycle is found, and an import inside a function is read."""
    assert _find_cycle({"fedsim.a": {"fedsim.b"}, "fedsim.b": {"fedsim.a"}}) == ["fedsim.a", "fedsim.b", "fedsim.a"]
    assert _find_cycle({"fedsim.a": {"fedsim.b"}}) is None
    lazy = [m for m in modules() if _within(m, "fedsim.cli") and "edge.run" in imports(m)]
    assert lazy, "the CLI's lazy import of the edge runtime is invisible to the checker"


def _module_imports(module: str) -> set[str]:
    """Modules of ours that ``module`` imports anywhere: at module level, in ``if TYPE_CHECKING:`` blocks (a cycle
    through type annotations is still a cycle) and inside functions (an import put off to run time hides a
    cycle; it does not remove it)."""
    return {t for t in imports(module) if t in modules() and t not in (module, "fedsim")}


def test_no_import_cycle_between_modules() -> None:
    """File by file, every import counted: engine.py and resume.py once imported each other (resume for type
    checking only); eva.py and local_sgd.py did, local_sgd's half inside a function."""
    cycle = _find_cycle({module: _module_imports(module) for module in modules()})
    assert cycle is None, " -> ".join(cycle or [])


def test_the_file_checker_reads_imports_inside_functions() -> None:
    """The command line imports its split and sweep commands inside a function: the file graph has those arrows
    (they made a cycle while split.py and sweep.py imported helpers back from the package)."""
    assert {"fedsim.cli.split", "fedsim.cli.sweep"} <= _module_imports("fedsim.cli")
    assert "fedsim.cli" not in _module_imports("fedsim.cli.split") | _module_imports("fedsim.cli.sweep")


# the one module that imports the whole run config: the Python API's builder (fedsim.api.simulation), which takes
# a RunConfig from its caller as one of its inputs. Everything else reads protocols of the sections it needs: the
# engines, the lifecycle, the plan and the launcher read fedsim.sim.run.settings's, the Flower apps their
# FlowerSettings, the command line and the sweep hold what fedsim.config loads as EngineSettings; components read
# their own sections. The set only shrinks
RUN_CONFIG_READERS = {"fedsim.api.simulation"}


def _imports_run_config(path: Path) -> bool:
    """Whether the file imports the name RunConfig (from fedsim.config or its run module), at any depth."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (
            isinstance(node, ast.ImportFrom)
            and (node.module or "").startswith("fedsim.config")
            and any(alias.name == "RunConfig" for alias in node.names)
        ):
            return True
        if isinstance(node, ast.Attribute) and node.attr == "RunConfig":  # fedsim.config.RunConfig, config.RunConfig
            return True
    return False


def test_components_take_their_own_sections_not_the_whole_run_config() -> None:
    readers = {
        module
        for module, path in modules().items()
        if _within(module, "fedsim") and not _within(module, "fedsim.config") and _imports_run_config(path)
    }
    assert readers <= RUN_CONFIG_READERS, sorted(readers - RUN_CONFIG_READERS)


def test_the_run_config_check_sees_an_import_inside_a_function_and_a_dotted_name(tmp_path: Path) -> None:
    inside = tmp_path / "inside.py"
    inside.write_text("def f():\n    from fedsim.config.run import RunConfig\n    return RunConfig\n")
    dotted = tmp_path / "dotted.py"
    dotted.write_text("import fedsim.config\n\ndef f(cfg: fedsim.config.RunConfig) -> None: ...\n")
    named = tmp_path / "named.py"
    named.write_text('"""RunConfig satisfies the protocols here."""\nfrom fedsim.config import DataConfig\n')
    assert _imports_run_config(inside) and _imports_run_config(dotted) and not _imports_run_config(named)


def test_no_module_is_longer_than_400_lines() -> None:
    long = {name: n for name, path in modules().items() if (n := len(path.read_text().splitlines())) > 400}
    generated = {name for name in long if name.startswith("fedsim.wire.") and name.endswith("_pb2")}
    assert set(long) <= generated, {k: v for k, v in long.items() if k not in generated}
