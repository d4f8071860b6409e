"""Compute time of kernels: roofline, ECM sum, GPU transfers, compute phases of scenario jobs."""

import pytest

from hybridsim.energy.machine import MachineError, parse_machine
from hybridsim.energy.roofline import Kernel, check_scenario, compute_phase, compute_phase_ns, kernel_time_s, \
    kernel_timing
from hybridsim.scenario import parse_scenario

# round numbers: peak DP 100 GFLOP/s (tau 10 ps), L1 1000 GB/s (1 ps/B), L2 500 GB/s (2 ps/B), DRAM 50 GB/s (20 ps/B)
# GPU: 1 TFLOP/s DP (1 ps), 1000 GB/s device memory, 10 GB/s host link, 4 us per launch
MACHINE = """\
model name: round
cores per socket: 10
clock: 1 GHz
FLOPs per cycle: {DP: 10, SP: 20}
memory hierarchy:
  - {level: L1, bandwidth: 1000 GB/s, energy per byte: 1 pJ}
  - {level: L2, bandwidth: 500 GB/s, energy per byte: 5 pJ}
  - {level: DRAM, bandwidth: 50 GB/s, energy per byte: 100 pJ}
energy per flop: {DP: 100 pJ}
static power: {package: 50 W, DRAM: 10 W}
network: {energy per byte per hop: 1 nJ}
gpu:
  SM count: 10
  clock: 1 GHz
  FLOPs per cycle: {DP: 100}
  memory bandwidth: 1000 GB/s
  idle power: 50 W
  active power: 250 W
  host link bandwidth: 10 GB/s
  launch latency: 4 us
"""
M = parse_machine(MACHINE)


def test_compute_bound():
    k = Kernel(W=1e9, Q={"DRAM": 1e8})  # FLOP 10 ms, DRAM 2 ms
    t = kernel_timing(M, k)
    assert t.time_s == pytest.approx(10e-3)
    assert t.bound == "FLOP"


def test_memory_bound():
    k = Kernel(W=1e8, Q={"L1": 1e9, "DRAM": 1e9})  # FLOP 1 ms, L1 1 ms, DRAM 20 ms
    t = kernel_timing(M, k)
    assert t.time_s == pytest.approx(20e-3)
    assert t.bound == "DRAM"


def test_ridge_point():
    assert M.ridge("DRAM") == pytest.approx(2.0)  # 100 GFLOP/s / 50 GB/s
    q = 1e9
    at = kernel_time_s(M, Kernel(W=2 * q, Q={"DRAM": q}))
    assert at == pytest.approx(20e-3)
    # below the ridge time follows the bandwidth, above it the FLOPs
    assert kernel_time_s(M, Kernel(W=1 * q, Q={"DRAM": q})) == pytest.approx(20e-3)
    assert kernel_time_s(M, Kernel(W=4 * q, Q={"DRAM": q})) == pytest.approx(40e-3)


def test_precision_changes_peak():
    assert kernel_time_s(M, Kernel(W=1e9, precision="SP")) == pytest.approx(5e-3)
    with pytest.raises(ValueError, match="precision HP"):
        kernel_time_s(M, Kernel(W=1e9, precision="HP"))


def test_ecm_sum_vs_roofline():
    k = Kernel(W=1e8, Q={"L1": 1e9, "L2": 1e9, "DRAM": 1e8})  # FLOP 1, L1 1, L2 2, DRAM 2 ms
    assert kernel_time_s(M, k, "roofline") == pytest.approx(2e-3)
    assert kernel_time_s(M, k, "ecm") == pytest.approx(5e-3)
    # compute-bound kernels are the same in both
    k2 = Kernel(W=1e9, Q={"L1": 1e8, "DRAM": 1e7})  # 10 ms vs 0.1 + 0.2
    assert kernel_time_s(M, k2, "ecm") == pytest.approx(10e-3)
    assert Kernel(W=1, model="ecm").model == "ecm"


def test_gpu_kernel_with_transfers():
    k = Kernel(device="gpu", W=1e9, Q={"HBM": 5e8}, h2d=1e8, d2h=1e8, count=2)
    t = kernel_timing(M, k)
    # per execution: max(1 ms compute, 0.5 ms memory) + 4 us launch + 2e8 B / 10 GB/s = 20 ms
    assert t.time_s == pytest.approx(2 * (1e-3 + 4e-6 + 20e-3))
    assert t.busy_s == pytest.approx(2e-3)
    assert t.transfer_s == pytest.approx(40e-3)
    with pytest.raises(ValueError, match="only apply to device: gpu"):
        Kernel(W=1, h2d=5)


SCEN = """\
topology: {groups: 3, routers_per_group: 2, terminals_per_router: 2, global_channels_per_router: 1}
jobs:
  - name: a
    ranks: 2
    iterations: 2
    workload: {kind: allreduce}
    compute:
      delay: 3us
      kernels:
        - {name: k1, W: 1.0e9, Q: {DRAM: 1.0e8}}
        - {name: k2, W: 1.0e8, Q: {DRAM: 1.0e9}, count: 0.5}
        - {name: g, device: gpu, W: 1.0e9, h2d: 1.0e7}
  - name: b
    ranks: 2
    iterations: 2
    workload: {kind: allreduce}
    compute: {delay: 7us}
machine:
%s
"""


def _scenario(machine=MACHINE, extra=""):
    text = SCEN % "\n".join("  " + line for line in machine.splitlines())
    return parse_scenario(text.replace("    compute: {delay: 7us}", "    compute: {delay: 7us}" + extra))


def test_compute_phase_ns_of_a_job():
    s = _scenario()
    # 3 us + 10 ms + 0.5 x 20 ms + (1 ms + 4 us + 1 ms transfer)
    assert compute_phase_ns(s, 0) == pytest.approx(3e3 + 10e6 + 10e6 + 2.004e6)
    assert compute_phase_ns(s, 1) == pytest.approx(7e3)
    assert compute_phase(s, 0).gpu_busy_s == pytest.approx(1e-3)


def test_fixed_delay_works_without_machine():
    s = parse_scenario("jobs: [{name: a, ranks: 2, iterations: 1, workload: {kind: allreduce}, "
                       "compute: {delay: 5us}}]\n")
    assert compute_phase_ns(s, 0) == pytest.approx(5e3)


def test_cache_follows_changes():
    s = _scenario()
    before = compute_phase_ns(s, 1)
    s.jobs[1].compute.delay = 9e3
    assert compute_phase_ns(s, 1) == pytest.approx(9e3) != before


def test_kernel_errors_name_job_kernel_and_line():
    text = SCEN % "\n".join("  " + line for line in MACHINE.splitlines())
    text = text.replace("{name: k2, W: 1.0e8, Q: {DRAM: 1.0e9}, count: 0.5}",
                        "{name: k2, W: -1, Q: {DRAM: 1.0e9, L3: 5}, flops: 3}")
    s = parse_scenario(text, "s.yaml")
    with pytest.raises(MachineError) as ei:
        check_scenario(s)
    probs = ei.value.problems
    # a scenario parsed from text keeps its YAML tree (provenance), so the error is located there too
    assert ("s.yaml:11:25: jobs.0.compute.kernels.1.W (job 'a', kernel 'k2'): Input should be greater than or equal "
            "to 0 (got -1)") in probs
    assert any("kernels.1.flops (job 'a', kernel 'k2'): unknown key 'flops'" in p for p in probs)


def test_kernel_errors_located_in_file(tmp_path):
    from hybridsim.scenario import load_scenario
    text = SCEN % "\n".join("  " + line for line in MACHINE.splitlines())
    text = text.replace("{name: k2, W: 1.0e8, Q: {DRAM: 1.0e9}, count: 0.5}", "{name: k2, W: 1.0e8, Q: {L3: 5}}")
    text = text.replace("{name: k1, W: 1.0e9, Q: {DRAM: 1.0e8}}", "{name: k1, W: -1.0e9}")
    p = tmp_path / "s.yaml"
    p.write_text(text)
    s = load_scenario(p, check_files=False)
    with pytest.raises(MachineError) as ei:
        compute_phase_ns(s, 0)
    msg = str(ei.value)
    assert f"{p}:10:25: jobs.0.compute.kernels.0.W (job 'a', kernel 'k1'): Input should be greater than or equal" in msg
    assert f"{p}:11:11: jobs.0.compute.kernels.1 (job 'a', kernel 'k2'): Q: unknown memory level(s) L3" in msg


def test_kernels_without_machine():
    text = (SCEN % "").replace("machine:\n", "")
    s = parse_scenario(text)
    with pytest.raises(MachineError, match="has compute kernels but the scenario has no machine"):
        compute_phase_ns(s, 0)
    assert compute_phase_ns(s, 1) == pytest.approx(7e3)


def test_gpu_kernel_needs_gpu():
    cpu_only = MACHINE.split("gpu:")[0]
    s = _scenario(cpu_only)
    with pytest.raises(MachineError,
                       match=r"kernels.2 \(job 'a', kernel 'g'\): device: gpu but the machine has no gpu"):
        compute_phase_ns(s, 0)
