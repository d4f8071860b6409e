"""The command line answers at once: what ``hybridsim --help`` and ``hybridsim validate`` import (behaviour, read from
``sys.modules`` in a fresh interpreter, not timings: those are in benchmarks/cli_speed.py), the surrogate registry's
declared names, and libyaml's C parser giving exactly the pure parser's tree, data and messages."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from hybridsim_common import yamlio

REPO = Path(__file__).resolve().parents[1]

#: what a command that uses no model must not import
MODEL_MODULES = ("torch", "transformers", "scipy", "surrogate.models.lstm", "surrogate.models.dcrnn",
                 "surrogate.models.smart", "surrogate.models.pretrained", "surrogate.models.gcn")


def _modules_after(code: str) -> dict:
    """Run ``code`` in a fresh interpreter (the repository first on the path); it leaves a JSON-able ``out`` dict,
    returned with ``out["modules"]`` = the names in ``sys.modules`` at the end."""
    script = f"import json, sys\nout = {{}}\n{code}\nout['modules'] = sorted(sys.modules)\nprint(json.dumps(out))\n"
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=REPO,
                       env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"})
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_help_imports_no_numpy_pydantic_yaml_or_models():
    out = _modules_after("from hybridsim.cli import build_parser\n"
                         "out['help'] = build_parser().format_help()")
    mods = set(out["modules"])
    assert "validate" in out["help"] and "corpus" in out["help"] and "serve" in out["help"]
    heavy = {"numpy", "pydantic", "yaml", "pyarrow", "grpc", "zmq"} | set(MODEL_MODULES)
    assert not heavy & mods, sorted(heavy & mods)


def test_validate_quickstart_imports_no_torch(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text((REPO / "examples" / "quickstart.yaml").read_text()
                   + "surrogate: {model: ridge, config: {kk: 3}}\n")
    out = _modules_after(
        "from hybridsim.cli import main\n"
        "out['ok'] = main(['validate', 'examples/quickstart.yaml'])\n"
        f"out['bad'] = main(['validate', {str(bad)!r}])\n"
        "from surrogate.registry import available\n"
        "out['available'] = available()\n")
    assert out["ok"] == 0 and out["bad"] == 2   # the ridge config is still checked (unknown key 'kk')
    mods = set(out["modules"])
    assert "surrogate.models.history" in mods  # ridge's own module: the check used the class
    assert not set(MODEL_MODULES) & mods, sorted(set(MODEL_MODULES) & mods)
    assert {"ridge", "lstm", "smart", "pretrained", "remote"} <= set(out["available"])


def test_the_declared_builtin_models_are_the_registered_classes():
    """``BUILTIN`` names each model without importing it; importing its module registers the same name."""
    import importlib

    from surrogate import registry

    for name, spec in registry.BUILTIN.items():
        mod, _, attr = spec.partition(":")
        cls = getattr(importlib.import_module(mod), attr)
        assert cls.name == name, spec
        assert registry.model_class(name) is cls
    for mod in {s.partition(":")[0] for s in registry.BUILTIN.values()}:
        for obj in vars(importlib.import_module(mod)).values():
            if isinstance(obj, type) and registry._REGISTRY.get(getattr(obj, "name", None)) is obj:
                assert obj.name in registry.BUILTIN, f"{mod}.{obj.__name__} registers {obj.name!r}, not declared"


# ----------------------------------------------------------------------------------------------- YAML: C vs pure
def _tree(node) -> list:
    """What the layers read of a node tree: kind, tag, scalar value, start line and column, in document order
    (an alias seen again is a marker)."""
    out, seen, stack = [], set(), [node]
    while stack:
        n = stack.pop()
        if id(n) in seen:
            out.append("alias")
            continue
        seen.add(id(n))
        out.append((type(n).__name__, n.tag, n.value if isinstance(n, yaml.ScalarNode) else len(n.value),
                    n.start_mark.line, n.start_mark.column))
        if isinstance(n, yaml.MappingNode):
            for k, v in reversed(n.value):
                stack += [v, k]
        elif isinstance(n, yaml.SequenceNode):
            stack += reversed(n.value)
    return out


def _load(text: str, c_parser: bool, monkeypatch, limits=yamlio.YamlLimits()):
    with monkeypatch.context() as m:
        if not c_parser:
            m.setattr(yamlio, "_CLoader", None)
            m.setattr(yamlio, "_warned_pure", True)
        try:
            data, root = yamlio.load(text, "f.yaml", limits)
        except yamlio.YamlInputError as exc:
            return "error", exc.problems
        return "ok", repr(data), (_tree(root) if root is not None else None)


DEEP = "x: " + "[" * 63 + "1" + "]" * 63 + "\n"   # the scalar at depth 65: one too deep
TRICKY = {
    "bom": "\ufeffa: 1\n", "crlf": "a: 1\r\nb: [1,\r\n 2]\r\n", "tab_indent": "a:\n\t- 1\n", "nel": "a: 1\x85b: 2\n",
    "line_separator": "a: b\u2028c: d\n", "directive": "%YAML 1.1\n---\na: 1\n", "explicit_keys": "? [1, 2]\n: x\n",
    "anchors": "a: &x {b: 1}\nc: *x\nd: *x\n", "merge": "<<: {a: 1}\nb: 2\na: 3\n",
    "merge_list": "a: {<<: [{x: 1}, {y: 2}], z: 3}\n", "binary": "a: !!binary aGVsbG8=\n", "set": "a: !!set {x, y}\n",
    "omap": "a: !!omap [{x: 1}, {y: 2}]\n", "timestamp": "a: 2001-12-14t21:59:43.10-05:00\n",
    "bad_date": "a: 2001-13-45\n", "int_forms": "a: 0x1F\nb: 0o17\nc: 017\nd: 1_000\ne: 1:30\nf: 0b101\ng: -0\n",
    "bad_octal": "a: 018\nb: 08\n", "floats": "a: .inf\nb: -.inf\nc: 1e999\nd: 1.0e+3\ne: .NaN\nf: 1_0.5\n",
    "int64": "a: 9223372036854775807\nb: 9223372036854775808\nc: -9223372036854775808\nd: 123456789012345678\n",
    "scalars": "a: yes\nb: No\nc: ~\nd: null\ne: ''\nf: \"\\u00e9\\n\"\ng: 'it''s'\nh: caf\u00e9 \U0001F600\n",
    "blocks": "a: |\n  line1\n  line2\nb: >-\n  folded\n  text\n", "nested_seq": "- - - a\n  - b\n- c\n",
    "indentless": "a:\n- 1\n- 2\nb:\n  - 3\n", "complex_keys": "[a, b]: c\n{a: b}: d\n",
    "unclosed": "a: [1, 2\n", "bad_mapping": "a: b: c\n", "undefined_alias": "a: *nope\n",
    "duplicate_anchor": "a: &x 1\nb: &x 2\n", "unterminated": "a: 'unterminated\n", "bad_indent": "a:\n  b: 1\n c: 2\n",
    "reserved": "a: @x\n", "two_docs": "a: 1\n---\nb: 2\n", "comment_only": "# nothing\n", "empty_doc": "---\n",
    "python_tag": "a: !!python/name:os.system\n", "unknown_tag": "a: !foo 1\n", "recursive": "a: &a [*a]\n",
    "duplicates": "a: 1\nb: {c: 1, c: 2}\na: 3\n", "bad_escape": "a: \"bad \\q escape\"\n", "no_newline": "a: 1",
    "flow_trailing": "{a: 1, b: [x, {c: d}], ? e : f,}\n", "deep_ok": "x: " + "[" * 62 + "1" + "]" * 62 + "\n",
    "deep_bad": DEEP, "deep_alias": "a: &x 1\nb: " + "[" * 63 + "*x" + "]" * 63 + "\n",
    "deep_flow_100k": "x: " + "[" * 100_000 + "]" * 100_000 + "\n",
    "laughs": "a: &a0 [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]\n" for i in range(1, 7)),
}


@pytest.mark.parametrize("name", sorted(TRICKY))
def test_c_parser_gives_the_pure_parsers_tree_data_and_messages(name, monkeypatch):
    text = TRICKY[name]
    limits = yamlio.YamlLimits(max_nodes=100_000)
    assert _load(text, True, monkeypatch, limits) == _load(text, False, monkeypatch, limits)


def _hostile_texts() -> dict:
    from test_hostile_scenarios import CASES  # the hostile scenario files (tests/test_hostile_scenarios.py)

    out = {}
    for name, (files, _fragments, _bomb) in CASES.items():
        text = files["s.yaml"]
        try:
            out[name] = text.decode() if isinstance(text, bytes) else text
        except UnicodeDecodeError:  # refused before any parser sees it
            continue
    return out


@pytest.mark.parametrize("name", sorted(_hostile_texts()))
def test_c_parser_reads_the_hostile_scenarios_as_the_pure_one(name, monkeypatch):
    text = _hostile_texts()[name]
    assert _load(text, True, monkeypatch) == _load(text, False, monkeypatch)


@pytest.mark.parametrize("path", sorted(p.relative_to(REPO) for p in REPO.glob("**/*.yaml")
                                        if ".git" not in p.parts), ids=str)
def test_c_parser_reads_every_shipped_yaml_as_the_pure_one(path, monkeypatch):
    text = (REPO / path).read_text()
    assert _load(text, True, monkeypatch) == _load(text, False, monkeypatch)


def test_depth_bound_is_exact_on_both_parsers(monkeypatch):
    """64 levels are read, the 65th node is refused where it starts, whichever parser; an alias counts as a level."""
    ok = "x: " + "[" * 62 + "1" + "]" * 62 + "\n"   # mapping 1, sequences 2..63, the scalar at 64
    for c in (True, False):
        assert _load(ok, c, monkeypatch)[0] == "ok"
        assert _load(DEEP, c, monkeypatch) == ("error", ["f.yaml:1:67: YAML nested deeper than 64 levels "
                                                         "(limit yaml_depth)"])
        assert _load(TRICKY["deep_alias"], c, monkeypatch) == ("error", ["f.yaml:2:67: YAML nested deeper than 64 "
                                                                         "levels (limit yaml_depth)"])


def test_problems_are_listed_in_document_order_with_their_place():
    """Hand-written: the tree checker's messages (duplicate keys, non-finite floats, 64-bit integers), in the order
    they appear, each at file:line:column with its field path; an aliased bad value is reported once."""
    text = ("a: &big 99999999999999999999\n"
            "b:\n"
            "  c: .inf\n"
            "  c: 1\n"
            "d: [1, *big, 0x10]\n"
            "e: 017\n")
    with pytest.raises(yamlio.YamlInputError) as exc:
        yamlio.load(text, "f.yaml")
    assert exc.value.problems == [
        "f.yaml:1:4: a: integer out of range (it must fit in 64 bits)",
        "f.yaml:4:3: b.c: duplicate key 'c' (first at line 3)",
        "f.yaml:3:6: b.c: '.inf' is not a finite number",
    ]


def test_node_count_includes_aliases_and_keys():
    """Keys count as nodes and every alias as the whole of what it names; the bound is exact."""
    text = "a: &a [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\nb: [*a, *a, *a]\n"
    # root 1 + key a 1 + list 11 + key b 1 + list (1 + 3 x 11) = 48 nodes once expanded
    yamlio.load(text, "f.yaml", yamlio.YamlLimits(max_nodes=48))
    with pytest.raises(yamlio.YamlInputError, match=r"f.yaml:1:1: <top level>: YAML has more than 47 nodes"):
        yamlio.load(text, "f.yaml", yamlio.YamlLimits(max_nodes=47))


def test_without_libyaml_one_warning_line(monkeypatch, capsys):
    monkeypatch.setattr(yamlio, "_CLoader", None)
    monkeypatch.setattr(yamlio, "_warned_pure", False)
    assert yamlio.load("a: 1\n", "f.yaml")[0] == {"a": 1}
    assert yamlio.load("b: 2\n", "f.yaml")[0] == {"b": 2}
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pure-Python parser" in err and "libyaml" in err


def test_large_stream_reads_alike_on_both_parsers(monkeypatch):
    """A stream-shaped document (one flow mapping per job) of 300 jobs: same data and tree either way."""
    jobs = "".join(f"- {{name: j{i}, ranks: {1 + i % 64}, iterations: {i % 7 + 1}, arrival: {i * 1.5}us, "
                   f"workload: {{kind: nn, dimension_sizes: [{1 + i % 64}], msg_size: 4096}}}}\n" for i in range(300))
    text = "scheduler: {queue: easy}\njobs:\n" + jobs
    c = _load(text, True, monkeypatch)
    assert c[0] == "ok" and c == _load(text, False, monkeypatch)
