"""Package boundaries (docs/design.md §1), checked from the source (``ast``, nothing is imported): surrogates know
nothing of how records were produced -- ``surrogate/`` reads run directories through the shared data model
(hybridsim.topology, hybridsim.records, hybridsim.rundir) and imports no scenario, placement, runner, service or CODES
code, at module level or inside a function; no import circle between files; the hybrid loop free of model-kind
branches; declared interfaces instead of ``getattr``/``hasattr`` probes on models, policies and directors."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("hybridsim", "surrogate", "codes_bridge", "controllers")


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


def _resolve(name: str) -> str | None:
    """The module file ``name`` (a module, or a name inside one) lives in."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imports(module: str) -> list[tuple[str, int, bool]]:
    """(imported module, line, at module level) for every import of a first-party module in ``module``'s file."""
    path = MODULES[module]
    tree = ast.parse(path.read_text(), str(path))
    top = {id(n) for n in tree.body}
    for n in tree.body:  # imports under a module-level ``if``/``try`` count as module level too
        if isinstance(n, (ast.If, ast.Try)):
            top |= {id(c) for c in ast.walk(n)}
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[:len(package) - node.level + 1] + ([node.module] if node.module else []))
            names = [base] + [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        for name in names:
            target = _resolve(name) if name.split(".")[0] in PACKAGES else None
            if target and target != module:
                out.append((target, node.lineno, id(node) in top))
    return out


def _graph(module_level_only: bool) -> dict[str, set[str]]:
    return {m: {t for t, _line, top in _imports(m) if top or not module_level_only} for m in MODULES}


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


def test_the_import_parser_sees_relative_and_function_level_imports():
    edges = {(t, top) for t, _line, top in _imports("hybridsim.runner")}
    assert ("hybridsim.backend", True) in edges          # from .backend import ... (module level)
    assert ("hybridsim.hybrid", False) in edges          # from .hybrid import ... inside build_controller


@pytest.mark.parametrize("module_level_only", [True, False], ids=["module-level", "module+function-level"])
def test_no_import_circle_between_files(module_level_only):
    cycles = _cycles(_graph(module_level_only))
    graph = _graph(module_level_only)
    detail = ["  " + " , ".join(f"{a} -> {sorted(graph[a] & set(c))}" for a in c) for c in cycles]
    assert not cycles, "import circles:\n" + "\n".join(detail)


FORBIDDEN = ("hybridsim.scenario", "hybridsim.placement", "hybridsim.runner", "hybridsim.service", "codes_bridge")


def _plain_imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import in ``path``; ``from hybridsim import runner`` counts as hybridsim.runner."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append((node.lineno, node.module))
            out += [(node.lineno, f"{node.module}.{a.name}") for a in node.names]
    return out


def _forbidden(module: str) -> bool:
    return any(module == f or module.startswith(f + ".") for f in FORBIDDEN)


def test_the_checker_sees_imports_inside_functions(tmp_path):
    p = tmp_path / "m.py"
    p.write_text("import numpy\n\ndef f():\n    from hybridsim import runner\n    import codes_bridge.conf\n")
    assert [(n, m) for n, m in _plain_imports(p) if _forbidden(m)] == [(4, "hybridsim.runner"), (5, "codes_bridge.conf")]


def test_surrogate_imports_no_producer_code():
    bad = [f"{p.relative_to(ROOT)}:{n}: {m}" for p in sorted((ROOT / "surrogate").rglob("*.py"))
           for n, m in _plain_imports(p) if _forbidden(m)]
    assert bad == []


def test_surrogate_names_no_producer_module_either():
    """Modules imported by name (importlib) count too."""
    bad = []
    for p in sorted((ROOT / "surrogate").rglob("*.py")):
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                    re.fullmatch(r"[\w.]+", node.value) and _forbidden(node.value):
                bad.append(f"{p.relative_to(ROOT)}:{node.lineno}: {node.value!r}")
    assert bad == [], "\n".join(bad)


def test_hybrid_loop_has_no_branch_on_model_kind():
    """hybridsim/hybrid.py asks models only through the Surrogate interface: no model names, no model classes."""
    from surrogate.registry import available

    path = ROOT / "hybridsim" / "hybrid.py"
    tree = ast.parse(path.read_text())
    names = set(available())
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
        for node in ast.walk(ast.parse(path.read_text())):
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
