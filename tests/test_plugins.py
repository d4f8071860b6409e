"""Plug-ins registered, not named: backends (``hybridsim.backends``) and commands (``hybridsim.commands``) come from
entry points, as the CODES bridge registers its own; hybridsim/ names no plug-in (tests/test_architecture.py)."""

from __future__ import annotations

import importlib.metadata
import io
import re
import sys
from contextlib import redirect_stderr, redirect_stdout
from importlib.metadata import EntryPoint

import pytest

from hybridsim import cli
from hybridsim.runner import RunError, backend_class

#: every command ``hybridsim --help`` lists: hybridsim's own and the CODES bridge's
COMMANDS = {"validate", "topology", "run", "bench", "describe-run", "report", "serve", "scenario-from-swf", "schedule", "corpus",
            "example", "dataset", "train", "evaluate", "pretrain", "calibrate", "overlap", "machine", "import-codes",
            "scenario-from-codes"}


def _with_entry_points(monkeypatch, group: str, extra: list[EntryPoint]) -> None:
    real = importlib.metadata.entry_points

    def entry_points(**kw):
        eps = list(real(**kw))
        return eps + extra if kw.get("group") == group else eps

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)


def test_the_codes_backend_and_commands_come_from_the_entry_points():
    eps = {(ep.group, ep.name): ep.value for g in ("hybridsim.backends", "hybridsim.commands")
           for ep in importlib.metadata.entry_points(group=g)}
    assert eps == {("hybridsim.backends", "codes"): "codes_bridge.backend:CodesBackend",
                   ("hybridsim.commands", "codes"): "codes_bridge.cli:register"}
    from codes_bridge.backend import CodesBackend
    from hybridsim.engine import Engine
    from hybridsim.service.remote import RemoteBackend

    assert backend_class("codes") is CodesBackend
    assert (backend_class("embedded"), backend_class("remote")) == (Engine, RemoteBackend)


def test_an_unknown_backend_names_the_installed_ones():
    with pytest.raises(RunError, match=r"unknown backend 'nope' \(installed: codes, embedded, remote\)"):
        backend_class("nope")


def test_help_lists_every_command_and_serve_offers_the_directors_flag():
    out = io.StringIO()
    with redirect_stdout(out), pytest.raises(SystemExit):
        cli.main(["--help"])
    listed = {m.group(1) for line in out.getvalue().splitlines() if (m := re.match(r" {4}(\S+)", line))}
    assert listed == COMMANDS
    out = io.StringIO()
    with redirect_stdout(out), pytest.raises(SystemExit):
        cli.main(["serve", "--help"])
    assert all(flag in out.getvalue() for flag in ("--grpc", "--engine", "--codes-director", "--max-clients"))


def test_a_package_adds_a_command_and_a_backend_through_entry_points(monkeypatch, tmp_path):
    (tmp_path / "demo_plugin.py").write_text(
        "from hybridsim_common.backend import Backend\n"
        "class DemoBackend(Backend):\n"
        "    def run(self, director=None, on_record=None, on_samples=None):\n"
        "        raise NotImplementedError\n"
        "def register(sub):\n"
        "    p = sub.add_parser('demo', help='a plug-in command')\n"
        "    p.set_defaults(func=lambda args: print('demo ran') or 0)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    _with_entry_points(monkeypatch, "hybridsim.commands",
                       [EntryPoint("demo", "demo_plugin:register", "hybridsim.commands")])
    out = io.StringIO()
    with redirect_stdout(out):
        assert cli.main(["demo"]) == 0
    assert out.getvalue() == "demo ran\n"
    monkeypatch.undo()
    monkeypatch.syspath_prepend(str(tmp_path))
    _with_entry_points(monkeypatch, "hybridsim.backends",
                       [EntryPoint("demo", "demo_plugin:DemoBackend", "hybridsim.backends")])
    assert backend_class("demo").__name__ == "DemoBackend"


def test_a_broken_command_plugin_is_an_error_naming_it(monkeypatch):
    _with_entry_points(monkeypatch, "hybridsim.commands",
                       [EntryPoint("broken", "no_such_module_xyz:register", "hybridsim.commands")])
    err = io.StringIO()
    with redirect_stderr(err):
        assert cli.main(["validate", "x.yaml"]) == 1
    assert "command plug-in broken = no_such_module_xyz:register (hybridsim.commands entry point) cannot be " \
           "loaded" in err.getvalue()
    sys.modules.pop("no_such_module_xyz", None)


def test_a_broken_backend_plugin_is_a_run_error(monkeypatch):
    _with_entry_points(monkeypatch, "hybridsim.backends",
                       [EntryPoint("broken", "no_such_module_xyz:Backend", "hybridsim.backends")])
    with pytest.raises(RunError, match=r"backend 'broken' \(no_such_module_xyz:Backend, a hybridsim.backends "
                                       r"entry point\) cannot be loaded"):
        backend_class("broken")


def test_command_modules_reach_the_error_types_without_the_cli():
    """hybridsim_common.errors is what command modules import; the CLI re-exports the same objects."""
    from hybridsim_common import errors

    assert cli.CliError is errors.CliError and (cli.EXIT_OK, cli.EXIT_FAIL, cli.EXIT_BAD_INPUT) == (0, 1, 2)
    assert errors.CliError("x").code == errors.EXIT_BAD_INPUT


def test_a_checkout_s_own_metadata_does_not_hide_the_installed_plugins(monkeypatch, tmp_path):
    """An editable install leaves ``hybridsim.egg-info`` in the checkout; run from there, importlib finds that copy
    first and keeps one distribution per name. Its entry points are ignored (the working directory is no plug-in
    source), and the installed distribution's still count: the codes backend stays known."""
    meta = tmp_path / "hybridsim.egg-info"
    meta.mkdir()
    (meta / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: hybridsim\nVersion: 0.0.0\n")
    (meta / "entry_points.txt").write_text("[hybridsim.backends]\nstale = nowhere:Nothing\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend("")
    from hybridsim.scenario import backend_registry

    names = backend_registry().names()
    assert "codes" in names and "stale" not in names
