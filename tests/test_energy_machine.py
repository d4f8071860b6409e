"""Machine files: Kerncraft-named fields, units, derived values, located errors."""

from pathlib import Path

import pytest

from hybridsim.energy.machine import MachineError, load_machine, machine_for_scenario, machine_to_yaml, \
    parse_machine, parse_quantity
from hybridsim.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[1]
MACHINES = ROOT / "examples" / "machines"


def test_quantities():
    assert parse_quantity("2.6 GHz", "frequency") == pytest.approx(2.6e9)
    assert parse_quantity("68 GB/s", "bandwidth") == pytest.approx(68e9)
    assert parse_quantity("25GiB/s", "bandwidth") == pytest.approx(25 * 2**30)
    assert parse_quantity("9.7 TFLOP/s", "flops") == pytest.approx(9.7e12)
    assert parse_quantity("120 pJ", "energy") == pytest.approx(120e-12)
    assert parse_quantity(45, "power") == 45.0
    with pytest.raises(ValueError, match="GHz|Hz"):
        parse_quantity("2.6 GB/s", "frequency")


def test_haswell_example_derived_values():
    m = load_machine(MACHINES / "haswell-ep.yaml")
    assert m.cores == 28
    # 2 sockets x 14 cores x 2.6 GHz x 16 DP FLOP/cycle
    assert m.peak("DP") == pytest.approx(2 * 14 * 2.6e9 * 16)
    assert m.peak("SP") == pytest.approx(2 * m.peak("DP"))
    assert list(m.levels()) == ["L1", "L2", "L3", "DRAM"]
    assert m.tau("DRAM") == pytest.approx(1 / 115e9)
    assert m.ridge("DRAM", "DP") == pytest.approx(2 * 14 * 2.6e9 * 16 / 115e9)
    assert m.static_power.total == pytest.approx(86.0)
    assert m.eps_level("DRAM") == pytest.approx(450e-12)
    assert m.network.energy_per_byte_per_hop == pytest.approx(160e-12)


def test_gpu_example_derived_values():
    m = load_machine(MACHINES / "cpu-gpu-node.yaml")
    g = m.gpu
    # A100: 108 SMs x 1.41 GHz x 64 FP64 FLOP/cycle = 9.7 TFLOP/s; HP given directly
    assert g.peak("DP") == pytest.approx(108 * 1.41e9 * 64)
    assert g.peak("HP") == pytest.approx(78e12)
    assert g.levels()["DRAM"] == pytest.approx(1555e9)
    assert g.host_link_bandwidth == pytest.approx(25e9)
    assert g.launch_latency == pytest.approx(5e-6)


def test_roundtrip_yaml(tmp_path):
    m = load_machine(MACHINES / "cpu-gpu-node.yaml")
    p = tmp_path / "m.yaml"
    p.write_text(machine_to_yaml(m))
    m2 = load_machine(p)
    assert m2 == m


def test_kerncraft_mem_level_is_dram():
    m = parse_machine("cores per socket: 1\nclock: 1 GHz\nFLOPs per cycle: {DP: 4}\n"
                      "memory hierarchy:\n  - {level: MEM, bandwidth: 10 GB/s}\n")
    assert list(m.levels()) == ["DRAM"]
    assert m.peak("DP") == pytest.approx(4e9)


BAD = """\
model name: x
cores per socket: 4
clock: 2 GHz
FLOPs per cycle: {DP: {total: 8}}
memory hierarchy:
  - level: L1
    bandwith: 100 GB/s
  - level: DRAM
    bandwidth: -5 GB/s
static power: {package: 10 W, DRM: 3}
"""


def test_machine_errors_name_line_and_field(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text(BAD)
    with pytest.raises(MachineError) as ei:
        load_machine(p)
    msg = str(ei.value)
    assert f"{p}:7:5: memory hierarchy.0.bandwith: unknown key 'bandwith'; did you mean 'bandwidth'?" in msg
    assert f"{p}:9:16: memory hierarchy.1.bandwidth:" in msg and "greater than 0" in msg
    assert f"{p}:10:31: static power.DRM: unknown key 'DRM'; did you mean 'DRAM'?" in msg
    assert len(ei.value.problems) == 4  # plus the missing bandwidth of L1


def test_machine_unit_error_and_duplicate_levels():
    with pytest.raises(MachineError, match=r"<string>:3:8: clock: expected a frequency"):
        parse_machine("cores per socket: 1\nFLOPs per cycle: {DP: 4}\nclock: 2 GB/s\n"
                      "memory hierarchy: [{level: L1, bandwidth: 1}]\n")
    with pytest.raises(MachineError, match="DRAM given twice"):
        parse_machine("cores per socket: 1\nFLOPs per cycle: {DP: 4}\nclock: 1\n"
                      "memory hierarchy: [{level: MEM, bandwidth: 1}, {level: DRAM, bandwidth: 2}]\n")


def test_gpu_power_check():
    text = ("cores per socket: 1\nFLOPs per cycle: {DP: 4}\nclock: 1\nmemory hierarchy: [{level: L1, bandwidth: 1}]\n"
            "gpu: {SM count: 2, clock: 1 GHz, FLOPs per cycle: {DP: 2}, memory bandwidth: 1 GB/s,\n"
            "      idle power: 60 W, active power: 50 W, host link bandwidth: 1 GB/s}\n")
    with pytest.raises(MachineError, match=r"<string>:5:6: gpu: active power .* below idle power"):
        parse_machine(text)


def _scenario(tmp_path, machine_text):
    sc = tmp_path / "sub" / "s.yaml"
    sc.parent.mkdir(exist_ok=True)
    sc.write_text("topology: {groups: 3, routers_per_group: 2, terminals_per_router: 2, "
                  "global_channels_per_router: 1}\n"
                  "jobs:\n  - {name: a, ranks: 2, iterations: 1, workload: {kind: allreduce}}\n" + machine_text)
    return load_scenario(sc)


def test_scenario_machine_file_relative(tmp_path):
    (tmp_path / "sub" / "m").mkdir(parents=True)
    (tmp_path / "sub" / "m" / "h.yaml").write_text((MACHINES / "haswell-ep.yaml").read_text())
    s = _scenario(tmp_path, "machine: {file: m/h.yaml}\n")
    assert machine_for_scenario(s).cores == 28


def test_scenario_machine_file_missing_and_inline_errors(tmp_path):
    # load_scenario checks the machine section up front
    with pytest.raises(MachineError, match=r"s.yaml:4:17: machine.file: machine file not found"):
        _scenario(tmp_path, "machine: {file: nope.yaml}\n")
    with pytest.raises(MachineError, match=r"s.yaml:9:18: machine.static power.packag: unknown key"):
        _scenario(tmp_path, "machine:\n  cores per socket: 2\n  clock: 1 GHz\n  FLOPs per cycle: {DP: 4}\n"
                            "  memory hierarchy: [{level: L1, bandwidth: 1e9}]\n  static power: {packag: 3}\n")


def test_machine_show_cli(capsys, tmp_path):
    from hybridsim.cli import main

    assert main(["machine", "show", str(MACHINES / "haswell-ep.yaml")]) == 0
    out = capsys.readouterr().out
    assert "peak DP: 1164.8 GFLOP/s" in out
    assert "DRAM" in out and "DP 10.13" in out  # ridge point 1164.8 / 115 FLOP/B
    assert main(["machine", "show", str(MACHINES / "cpu-gpu-node.yaml"), "--json"]) == 0
    import json
    info = json.loads(capsys.readouterr().out)
    assert info["gpu"]["levels"]["DRAM"]["ridge_FLOP_per_B"]["DP"] == pytest.approx(108 * 1.41e9 * 64 / 1555e9)
    bad = tmp_path / "bad.yaml"
    bad.write_text(BAD)
    assert main(["machine", "show", str(bad)]) == 2
    assert f"{bad}:7:5:" in capsys.readouterr().err
