"""The CLI contract: exit codes, messages on stderr, nothing written on bad input."""

import json
import subprocess
import sys

from hybridsim.cli import main


def test_validate_ok_and_bad(tmp_path, capsys, repo):
    assert main(["validate", str(repo / "examples/quickstart.yaml")]) == 0
    bad = tmp_path / "bad.yaml"
    bad.write_text("jobs:\n  - name: a\n    rank: 3\n")
    assert main(["validate", str(bad), str(repo / "examples/quickstart.yaml")]) == 2
    err = capsys.readouterr().err
    assert f"{bad}:3:5: jobs.0.rank: unknown key 'rank'; did you mean 'ranks'?" in err


def test_topology_json_1056(tmp_path, capsys, repo):
    assert main(["topology", str(repo / "examples/dragonfly-1056-3jobs.yaml"), "--json",
                 "--write-graph", str(tmp_path / "g")]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["routers"] == 264 and info["terminals"] == 1056 and info["router_ports"] == 3960
    assert info["radix"] == 15 and info["diameter"] == 3
    ports = (tmp_path / "g" / "ports.csv").read_text().splitlines()
    assert len(ports) == 3961 and ports[1].startswith("0,0,0,0,local")
    edges = (tmp_path / "g" / "edges.csv").read_text().splitlines()
    assert len(edges) - 1 == 264 * 15 * 14 + 2 * (924 + 528)


def test_run_bad_scenario_writes_nothing(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("jobs: [{name: a, ranks: 2, iterations: 1, workload: {kind: allreduce}}]\nseed: -1\n")
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, "-m", "hybridsim", "run", str(bad), "-o", str(out)],
                       capture_output=True, text=True)
    assert r.returncode == 2
    assert "seed" in r.stderr and "greater than or equal to 0" in r.stderr
    assert not out.exists()


def test_run_prints_a_summary(tmp_path, capsys):
    import json

    sc = tmp_path / "s.yaml"
    sc.write_text("topology: {groups: 9, routers_per_group: 4, terminals_per_router: 2, global_channels_per_router: 2}\n"
                  "jobs:\n  - {name: a, ranks: 4, iterations: 3, workload: {kind: allreduce, size: 1024}}\n")
    assert main(["run", str(sc), "-o", str(tmp_path / "r"), "--no-progress"]) == 0
    out = capsys.readouterr().out.splitlines()
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert out[0].startswith(f"{tmp_path / 'r'}: completed (simulate, embedded)")
    assert f"{summary['events']:,} events" in out[0]
    assert out[1].split() == ["a", "completion", f"{summary['jobs']['a']['completion_time_ns'] / 1e6:.3f}", "ms"]


def test_a_listed_command_module_that_is_missing_is_an_error(monkeypatch, capsys):
    import hybridsim.cli as cli

    monkeypatch.setattr(cli, "COMMAND_MODULES", cli.COMMAND_MODULES + ("hybridsim.no_such_cli_module",))
    assert main(["topology", "--help"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("hybridsim: error: command module hybridsim.no_such_cli_module (hybridsim.cli."
                          "COMMAND_MODULES) cannot be imported: No module named 'hybridsim.no_such_cli_module'"), err


def test_every_listed_command_module_registers_a_command():
    import argparse
    import importlib

    from hybridsim.cli import COMMAND_MODULES

    for modname in COMMAND_MODULES:
        sub = argparse.ArgumentParser().add_subparsers()
        importlib.import_module(modname).register(sub)
        assert sub.choices, modname
