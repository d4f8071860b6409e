"""Package boundaries (DESIGN.md §1): surrogates know nothing of how records were produced. ``surrogate/`` reads run
directories through the shared data model (hybridsim.topology, hybridsim.records, hybridsim.rundir) and imports no
scenario, placement, runner, service or CODES code, at module level or inside a function."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN = ("hybridsim.scenario", "hybridsim.placement", "hybridsim.runner", "hybridsim.service", "codes_bridge")


def _imports(path: Path) -> list[tuple[int, str]]:
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
    assert [(n, m) for n, m in _imports(p) if _forbidden(m)] == [(4, "hybridsim.runner"), (5, "codes_bridge.conf")]


def test_surrogate_imports_no_producer_code():
    bad = [f"{p.relative_to(ROOT)}:{n}: {m}" for p in sorted((ROOT / "surrogate").rglob("*.py"))
           for n, m in _imports(p) if _forbidden(m)]
    assert bad == []
