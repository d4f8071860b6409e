"""Package boundaries (docs/design.md §1), checked from the source (``ast``, nothing is imported; each file is parsed once).

The layering is one rule, :data:`MAY_IMPORT`: what each package may import besides itself. ``surrogate/`` and
``controllers/`` stand on the ground floor only (:data:`GROUND_FLOOR`: the vocabulary every layer shares), the roof
(``hybridsim/``) names no plug-in (``codes_bridge`` registers through entry points), and the ground floor imports
nothing above it. An import counts wherever it is: at module level, inside a function, or by name (a string that
names a first-party module, as ``importlib.import_module`` loads the CLI's command modules). The same edges must form
no circle between files nor between packages. Besides: the hybrid loop free of model-kind branches; declared
interfaces instead of ``getattr``/``hasattr`` probes on models, policies and directors."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("hybridsim_common", "hybridsim", "surrogate", "codes_bridge", "controllers")

#: the shared vocabulary (backend/director protocol, records, run-directory format, topology, units, YAML reader,
#: interrupts, CLI errors, where plug-in modules are imported from); module prefixes: one entry (the ground-floor
#: package) once it has a package of its own
GROUND_FLOOR = ("hybridsim_common",)

#: THE layering rule: what the modules of each floor may import (module prefixes), wherever and however they do
MAY_IMPORT = {
    "floor": GROUND_FLOOR,
    "surrogate": ("surrogate",) + GROUND_FLOOR,
    "controllers": ("controllers",) + GROUND_FLOOR,
    "hybridsim": ("hybridsim", "surrogate", "controllers") + GROUND_FLOOR,  # the roof: everything but plug-ins
    "codes_bridge": PACKAGES,                                   # a plug-in: stands on everything
}

#: arrows that still run up, each until the change named beside it lands; the test fails once one is gone, so the
#: list only shrinks
KNOWN_UPWARD: dict = {}


def _has_prefix(module: str, prefixes) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def floor_of(module: str) -> str:
    """The floor a module stands on: ``floor`` for the ground floor, else its top-level package."""
    return "floor" if _has_prefix(module, GROUND_FLOOR) else module.split(".")[0]


def may_import(importer: str, target: str) -> bool:
    return _has_prefix(target, MAY_IMPORT[floor_of(importer)])


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            if "_gen" in path.parts:  # generated gRPC stubs
                continue
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


MODULES = _modules()


@functools.lru_cache(maxsize=None)
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), str(path))


def _resolve(name: str) -> str | None:
    """The module file ``name`` (a module, or a name inside one) lives in."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


#: a string that names a module (``pkg.mod``) or an object in one (``pkg.mod:Name``, the entry-point syntax)
_BY_NAME = re.compile(r"([A-Za-z_]\w*(?:\.\w+)+)(?::[\w.]+)?")


def edges_of(tree: ast.Module, module: str, is_package: bool = False) -> list[tuple[str, int, str]]:
    """``(imported module, line, how)`` for every first-party module ``module``'s source reaches: ``how`` is
    ``module`` (a module-level import, also under a module-level ``if``/``try``), ``function`` (an import inside a
    function) or ``by name`` (a string naming the module exactly, e.g. one ``importlib.import_module`` loads)."""
    top = {id(n) for n in tree.body}
    for n in tree.body:
        if isinstance(n, (ast.If, ast.Try)):
            top |= {id(c) for c in ast.walk(n)}
    package = module.split(".") if is_package else module.split(".")[:-1]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[:len(package) - node.level + 1] + ([node.module] if node.module else []))
            names = [base] + [f"{base}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and (m := _BY_NAME.fullmatch(node.value)):
            if m.group(1) in MODULES and m.group(1) != module:
                out.append((m.group(1), node.lineno, "by name"))
            continue
        else:
            continue
        for name in names:
            target = _resolve(name) if name.split(".")[0] in PACKAGES else None
            if target and target != module:
                out.append((target, node.lineno, "module" if id(node) in top else "function"))
    return out


@functools.lru_cache(maxsize=None)
def _imports(module: str) -> tuple[tuple[str, int, str], ...]:
    path = MODULES[module]
    return tuple(edges_of(_tree(path), module, path.name == "__init__.py"))


def _graph(module_level_only: bool) -> dict[str, set[str]]:
    return {m: {t for t, _line, how in _imports(m) if how == "module" or not module_level_only} for m in MODULES}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
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
    return out


def test_the_cycle_finder_finds_a_planted_circle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_the_import_parser_sees_relative_function_level_and_by_name_imports():
    edges = {(t, how) for t, _line, how in _imports("hybridsim.runner")}
    assert ("hybridsim_common.backend", "module") in edges          # from .backend import ... (module level)
    assert ("hybridsim.hybrid", "function") in edges         # from .hybrid import ... inside build_controller
    assert ("hybridsim.engine", "by name") in edges          # BUILTIN_BACKENDS: "hybridsim.engine:Engine"
    planted = ast.parse("import importlib\nMODULES = ('hybridsim.cli_run', 'not a module', 'hybridsim.nothing')\n"
                        "def f():\n    from hybridsim import cli\n    importlib.import_module('codes_bridge.cli')\n")
    assert sorted(edges_of(planted, "hybridsim.x"), key=lambda e: (e[1], e[0])) == [
        ("hybridsim.cli_run", 2, "by name"), ("hybridsim", 4, "function"), ("hybridsim.cli", 4, "function"),
        ("codes_bridge.cli", 5, "by name")]


def test_a_circle_through_a_by_name_load_is_a_circle():
    """The circle the CLI had: hybridsim.cli loads a command module by name, which imports hybridsim.cli back."""
    cli = edges_of(ast.parse("COMMAND_MODULES = ('codes_bridge.cli',)\n"), "hybridsim.cli")
    plugin = edges_of(ast.parse("from hybridsim.cli import CliError\n"), "codes_bridge.cli")
    graph = {"hybridsim.cli": {t for t, _l, _h in cli}, "codes_bridge.cli": {t for t, _l, _h in plugin}}
    assert _cycles(graph) == [["codes_bridge.cli", "hybridsim.cli"]]


@pytest.mark.parametrize("module_level_only", [True, False], ids=["module-level", "module+function-level+by-name"])
def test_no_import_circle_between_files(module_level_only):
    graph = _graph(module_level_only)
    cycles = _cycles(graph)
    detail = ["  " + " , ".join(f"{a} -> {sorted(graph[a] & set(c))}" for a in c) for c in cycles]
    assert not cycles, "import circles:\n" + "\n".join(detail)


def _upward() -> list[tuple[str, str, str]]:
    """``(importer, target, where)`` of every import :data:`MAY_IMPORT` does not allow."""
    return [(m, t, f"{MODULES[m].relative_to(ROOT)}:{line} ({how})") for m in MODULES
            for t, line, how in _imports(m) if not may_import(m, t)]


def test_the_layering_rule_says_what_each_floor_may_import():
    assert may_import("surrogate.graphs", "hybridsim_common.topology")
    assert may_import("controllers.base", "hybridsim_common.backend")
    assert not may_import("surrogate.dataset", "hybridsim.scenario")
    assert not may_import("surrogate.models.smart", "controllers.base")
    assert not may_import("controllers.base", "hybridsim.runner")
    assert not may_import("hybridsim.runner", "codes_bridge.backend")     # the roof names no plug-in
    assert not may_import("hybridsim_common.topology", "hybridsim.scenario")     # the ground floor imports nothing above
    assert not may_import("hybridsim_common.backend", "hybridsim.backends")      # a prefix is a whole module name
    assert may_import("codes_bridge.cli", "hybridsim.cli_serve")


def test_every_import_follows_the_layering():
    bad = [f"{where}: {m} -> {t}" for m, t, where in _upward() if (m, t) not in KNOWN_UPWARD]
    assert not bad, "imports against the layering (MAY_IMPORT):\n" + "\n".join(bad)


def test_the_known_upward_arrows_are_still_there():
    """Each exception in KNOWN_UPWARD is still needed: once its change lands, delete it here."""
    still = {(m, t) for m, t, _where in _upward()}
    assert [k for k in KNOWN_UPWARD if k not in still] == []


def test_no_circle_between_floors():
    graph: dict[str, set[str]] = {f: set() for f in MAY_IMPORT}
    for m in MODULES:
        graph[floor_of(m)] |= {floor_of(t) for t, _l, _h in _imports(m) if (m, t) not in KNOWN_UPWARD} - {floor_of(m)}
    assert _cycles(graph) == [], graph


def test_hybrid_loop_has_no_branch_on_model_kind():
    """hybridsim/hybrid.py asks models only through the Surrogate interface: no model names, no model classes."""
    from importlib.metadata import entry_points

    from surrogate.registry import BUILTIN, ENTRY_POINT_GROUP

    tree = _tree(ROOT / "hybridsim" / "hybrid.py")
    names = set(BUILTIN) | {ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)}
    bad = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            for sub in ast.walk(node):
                if isinstance(sub, ast.Constant) and sub.value in names:
                    bad.append(f"hybrid.py:{node.lineno}: compares with model name {sub.value!r}")
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            mod = node.module if isinstance(node, ast.ImportFrom) else node.names[0].name
            if mod and mod.startswith("surrogate.models"):
                bad.append(f"hybrid.py:{node.lineno}: imports model module {mod}")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance":
            cls = ast.unparse(node.args[1])
            if cls not in ("Surrogate", "Mode", "Policy", "dict"):
                bad.append(f"hybrid.py:{node.lineno}: isinstance(..., {cls})")
    assert not bad, "\n".join(bad)


#: the controller's modules: they ask a model through the Surrogate interface and its feeds, never what it needs
CONTROLLER_FILES = ("hybridsim/hybrid.py", "hybridsim/timeline.py", "hybridsim/runner.py",
                    "hybridsim/fast_forward.py")

#: a model-kind test: any ``needs_*`` ability read off an object (``needs_graphs``, ``needs_flow``, ...)
NEEDS = re.compile(r"needs_\w+")


def _asks_needs(tree) -> list[int]:
    return [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Attribute) and NEEDS.fullmatch(n.attr)]


def test_the_controller_does_not_ask_what_a_model_needs():
    """The feeds own the wiring a model's needs call for (surrogate.online.Feeds: port graphs; hybridsim.corunners:
    the flow model): HybridController, its fast-forward, the timeline and build_controller never ask a model whether
    it needs graphs, flow values or anything else (issues 20 and 34)."""
    bad = [f"{f}:{line}" for f in CONTROLLER_FILES if (ROOT / f).is_file()
           for line in _asks_needs(_tree(ROOT / f))]
    assert not bad, "the controller asks what a model needs:\n" + "\n".join(bad)


def test_the_needs_check_would_catch_the_old_controllers():
    old = ast.parse("if self.graphs is not None and self.models[job_id].needs_graphs:\n    pass\n"
                    "if any(m.needs_flow for m in models.values()):\n    pass\n")
    assert _asks_needs(old) == [1, 3]


def test_the_controller_stays_readable():
    """hybrid.py holds the loop (<= 600 lines); every first-party file over 600 lines says why in its docstring."""
    assert len((ROOT / "hybridsim/hybrid.py").read_text().splitlines()) <= 600
    long = []
    for path in sorted(ROOT.glob("*/**/*.py")):
        rel = path.relative_to(ROOT)
        if rel.parts[0] not in ("hybridsim", "hybridsim_common", "surrogate", "controllers", "codes_bridge"):
            continue
        text = path.read_text()
        if len(text.splitlines()) > 600:
            doc = ast.get_docstring(ast.parse(text)) or ""
            if "600 lines" not in doc:
                long.append(f"{rel}: {len(text.splitlines())} lines")
    assert not long, "files over 600 lines whose docstring does not say why (mention '600 lines'):\n" + "\n".join(long)


#: what a getattr/hasattr must not be asked of: models, policies, controllers and directors declare what they offer
PROBED = re.compile(r"(self\.)?(model|models\[.*\]|m|surrogate|net|controller|ctl|policy|director)")
#: documented exceptions: (file, receiver) -- Hugging Face configs differ per model family
ALLOWED = {("surrogate/llm.py", "model.config")}


def test_no_getattr_hasattr_probes_on_models_or_controllers():
    bad = []
    for m, path in MODULES.items():
        if not m.startswith(("hybridsim", "surrogate")):
            continue
        rel = str(path.relative_to(ROOT))
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                    node.func.id in ("getattr", "hasattr") and node.args:
                receiver = ast.unparse(node.args[0])
                if PROBED.fullmatch(receiver) and (rel, receiver) not in ALLOWED:
                    bad.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")
    assert not bad, "probing instead of a declared interface:\n" + "\n".join(bad)


def test_the_probe_check_would_catch_the_old_runner_probe():
    call = ast.parse('getattr(controller, "wants_samples", False)').body[0].value
    assert PROBED.fullmatch(ast.unparse(call.args[0]))


def test_remote_model_registers_through_the_entry_point():
    """The gRPC client's ``remote`` model reaches the registry through the ``hybridsim.surrogates`` entry point."""
    from importlib.metadata import entry_points

    from surrogate.registry import ENTRY_POINT_GROUP, model_class

    eps = {ep.name: ep.value for ep in entry_points(group=ENTRY_POINT_GROUP)}
    assert eps.get("remote") == "hybridsim.service.client:RemoteSurrogate"
    assert model_class("remote").__module__ == "hybridsim.service.client"
