"""scenario-from-codes: the hybridsim scenario equivalent to a CODES run's inputs."""

from __future__ import annotations


import pytest

from codes_bridge.conf import ConfError
from codes_bridge.scenario_from_codes import scenario_from_codes, write_scenario_yaml
from hybridsim.cli import main as cli_main
from hybridsim.placement import place_jobs
from hybridsim.scenario import load_scenario
from refdata import CODES

E = CODES / "E-72node-milc-lammps-syn" / "hf-random-seq"
C = CODES / "C-1056node-milc-lammps-nn" / "hf-random-seq"


def test_run_e_mapping():
    sc = scenario_from_codes(E)
    t = sc.topology
    assert (t.groups, t.routers_per_group, t.terminals_per_router, t.global_channels_per_router) == (9, 4, 2, 2)
    assert t.bandwidth.as_tuple() == (5.25, 4.7, 5.25) and t.packet_size == 4096
    assert (t.vc_buffer.local, t.vc_buffer.global_, t.vc_buffer.terminal) == (16384, 16384, 32768)
    assert t.routing == "prog-adaptive" and t.router_delay == 100.0
    assert t.connections.intra.name == "dfdally-72-intra"
    jobs = [(j.name, j.ranks, j.iterations, j.workload.kind) for j in sc.jobs]
    assert jobs == [("milc-36", 36, 1600, "milc"), ("lammps-32", 32, 230, "lammps"),
                    ("synthetic1", 4, None, "uniform_random")]
    assert sc.jobs[0].workload.dimension_sizes == [3, 3, 2, 2] and sc.jobs[0].workload.msg_size == 49152
    assert sc.jobs[1].workload.num_x_replicas == 2 and sc.jobs[1].workload.cpu_sim_speedup == 1e6
    assert sc.jobs[2].workload.msg_size == 4096 and sc.jobs[2].workload.interval == 4000.0  # --payload_sz, mean_interval
    assert sc.placement.policy == "file" and sc.placement.file.name == "alloc-random.conf"
    assert sc.sampling.interval == 250000.0
    assert sc.backend.kind == "embedded" and sc.backend.codes.synch == "sequential"
    assert sc.backend.codes.sample_count == 100


def test_placement_reproduces_the_alloc_file(tmp_path):
    p = write_scenario_yaml(scenario_from_codes(C), tmp_path / "c.yaml")
    sc = load_scenario(p)
    placed = place_jobs(sc, sc.build_topology())
    alloc = [list(map(int, l.split())) for l in (C / "alloc-random.conf").read_text().splitlines() if l.strip()]
    assert [list(map(int, a)) for a in placed] == alloc[:3]
    assert [j.name for j in sc.jobs] == ["milc-512", "lammps-256", "nn-256"]
    assert sc.jobs[2].workload.kind == "nearest_neighbor" and sc.jobs[2].iterations == 6


def test_optimistic_run_and_end_time():
    sc = scenario_from_codes(CODES / "F-1056node-milc-lammps-syn" / "hf-random-opt-np2")
    assert sc.backend.codes.synch == "optimistic" and sc.backend.codes.np == 2
    assert sc.backend.embedded.end_time == 130000000.0
    assert sc.jobs[2].workload.interval == 20000.0


def test_cli_and_errors(tmp_path, capsys):
    out = tmp_path / "e.yaml"
    assert cli_main(["scenario-from-codes", str(E), "-o", str(out)]) == 0
    assert load_scenario(out).jobs[0].iterations == 1600
    assert cli_main(["scenario-from-codes", str(E), "-o", str(out)]) == 2  # exists
    capsys.readouterr()
    run = tmp_path / "run"
    run.mkdir()
    conf = (E / "dfdally-72-3jobs.conf").read_text().replace('routing="prog-adaptive"', 'routing="smart-prog"')
    (run / "net.conf").write_text(conf)
    (run / "workloads.conf").write_text("4 synthetic1 0 4000\n")
    with pytest.raises(ConfError, match=r"net.conf:\d+: routing 'smart-prog' has no hybridsim equivalent"):
        scenario_from_codes(run)
    (run / "net.conf").write_text(conf.replace("smart-prog", "minimal"))
    assert cli_main(["scenario-from-codes", str(run), "-o", str(tmp_path / "r.yaml")]) == 2
    assert "needs --payload_sz" in capsys.readouterr().err


def test_synthetic_only_run():
    sc = scenario_from_codes(CODES / "A-72node-synthetic-uniform" / "seq")
    (job,) = sc.jobs
    assert job.workload.kind == "uniform_random" and job.ranks == 72 and job.iterations is None
    assert job.workload.msg_size == 4096 and job.workload.interval == 4000.0
    assert sc.topology.bandwidth.as_tuple() == (2.0, 2.0, 2.0)
    assert sc.backend.embedded.end_time == 2_000_000.0 and sc.sampling.interval == 100000.0
