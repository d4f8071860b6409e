"""Scenario loading: defaults, units, and every bad-input message (file:line:col, field path, expectation)."""

import textwrap

import pytest

from hybridsim.scenario import ScenarioError, load_scenario, parse_scenario

BASE = """\
topology:
  groups: 9
  routers_per_group: 4
  terminals_per_router: 2
  global_channels_per_router: 2
jobs:
  - name: a
    ranks: 8
    iterations: 3
    workload: {kind: allreduce}
"""


def write(tmp_path, text, name="s.yaml"):
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return p


def test_defaults_are_codes_1056_reference():
    sc = parse_scenario("jobs: [{name: a, ranks: 4, iterations: 1, workload: {kind: allreduce}}]")
    t = sc.topology
    assert (t.groups, t.routers_per_group, t.terminals_per_router, t.global_channels_per_router) == (33, 8, 4, 4)
    assert t.n_terminals == 1056
    assert (t.bandwidth.local, t.bandwidth.global_, t.bandwidth.terminal) == (5.25, 4.7, 5.25)
    assert (t.vc_buffer.local, t.vc_buffer.global_, t.vc_buffer.terminal) == (16384, 16384, 32768)
    assert t.packet_size == 4096 and t.routing == "prog-adaptive" and t.num_vcs == 4
    assert t.router_delay == 100.0
    # link latency default: one 4096-B chunk at the link bandwidth (docs/workloads.md §7.2: 726.609 / 811.638 ns)
    lat = t.link_latency()
    assert lat[0] == pytest.approx(726.609, abs=1e-3) and lat[1] == pytest.approx(811.638, abs=1e-3)
    assert t.effective_credit_delay() == pytest.approx(1.419, abs=1e-3)
    assert sc.sampling.interval == 250_000.0


def test_time_units():
    sc = parse_scenario(BASE + "sampling: {interval: 1.5ms}\n")
    assert sc.sampling.interval == 1.5e6
    sc = parse_scenario(BASE + "sampling: {interval: '250 us'}\n")
    assert sc.sampling.interval == 250e3


def expect_error(text, *fragments, tmp_path=None):
    with pytest.raises(ScenarioError) as ei:
        parse_scenario(text, "f.yaml")
    msg = str(ei.value)
    for frag in fragments:
        assert frag in msg, msg
    return msg


def test_yaml_syntax_error_has_line_and_column():
    expect_error("jobs:\n  - name: a\n    ranks: [1, 2\n", "f.yaml:", "YAML syntax error")
    with pytest.raises(ScenarioError) as ei:
        parse_scenario("a: 1\n b: 2\n", "f.yaml")
    assert str(ei.value).startswith("f.yaml:2:")


def test_unknown_key_suggests_closest():
    msg = expect_error(BASE.replace("  groups: 9", "  gruops: 9"), "f.yaml:2:3", "topology.gruops",
                       "did you mean 'groups'")
    assert "valid keys" in msg
    expect_error(BASE + "samplng: {}\n", "f.yaml:11:1", "did you mean 'sampling'")


def test_wrong_type_names_field_and_line():
    expect_error(BASE.replace("ranks: 8", "ranks: many"), "f.yaml:8:12", "jobs.0.ranks", "integer")


def test_more_ranks_than_terminals():
    expect_error(BASE.replace("ranks: 8", "ranks: 100"), "need 100 ranks", "only 72 terminals")


def test_zero_or_negative_bandwidth():
    expect_error(BASE + "  bandwidth: {local: 0}\n".replace("  bandwidth", "") if False else
                 BASE.replace("  global_channels_per_router: 2", "  global_channels_per_router: 2\n  bandwidth: {global: -1}"),
                 "topology.bandwidth.global", "greater than or equal to 0.001", "f.yaml:6:")


def test_vc_buffer_smaller_than_packet():
    expect_error(BASE.replace("  global_channels_per_router: 2",
                              "  global_channels_per_router: 2\n  vc_buffer: {local: 1024}"),
                 "VC buffer smaller than one packet", "local (1024 B)")


def test_duplicate_job_names():
    expect_error(BASE + "  - {name: a, ranks: 2, iterations: 1, workload: {kind: allreduce}}\n",
                 "duplicate job names: a")


def test_dimension_product_must_match_ranks():
    expect_error(BASE.replace("workload: {kind: allreduce}", "workload: {kind: milc, dimension_sizes: [2, 2]}"),
                 "product of dimension_sizes [2, 2] = 4 != ranks 8")


def test_unknown_workload_kind():
    expect_error(BASE.replace("kind: allreduce", "kind: hpl"), "jobs.0.workload", "milc")


def test_missing_jobs():
    expect_error("seed: 1\n", "jobs", "required field is missing")


def test_overlapping_placement_file(tmp_path):
    (tmp_path / "alloc.conf").write_text("0 1 2 3 4 5 6 7\n7 8\n")
    p = write(tmp_path, BASE + "  - {name: b, ranks: 2, iterations: 1, workload: {kind: allreduce}}\n"
              "placement: {policy: file, file: alloc.conf}\n")
    with pytest.raises(ScenarioError, match="node 7 is also on line 1"):
        load_scenario(p)


def test_connection_file_must_match_topology(tmp_path, codes_data):
    p = write(tmp_path, BASE.replace("  global_channels_per_router: 2",
                                     "  global_channels_per_router: 2\n  connections:\n"
                                     f"    intra: {codes_data}/C-1056node-milc-lammps-nn/dfdally-1056-intra\n"
                                     f"    inter: {codes_data}/C-1056node-milc-lammps-nn/dfdally-1056-inter"))
    with pytest.raises(ScenarioError, match=r"s.yaml:\d+:\d+: topology.connections: intra-group file"):
        load_scenario(p)
    ok = write(tmp_path, BASE.replace("  global_channels_per_router: 2",
                                      "  global_channels_per_router: 2\n  connections:\n"
                                      f"    intra: {codes_data}/dfdally-72-intra\n"
                                      f"    inter: {codes_data}/dfdally-72-inter"), "ok.yaml")
    assert load_scenario(ok).build_topology().n_routers == 36


def test_missing_file(tmp_path):
    with pytest.raises(ScenarioError, match="no such file"):
        load_scenario(tmp_path / "nope.yaml")


def test_examples_validate(repo):
    files = sorted((repo / "examples").glob("*.yaml"))
    assert len(files) >= 3
    for f in files:
        load_scenario(f)
