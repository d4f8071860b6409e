"""CODES inputs written from a scenario agree with the files CODES actually ran (reference runs B, C, E)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from codes_bridge.writers import (CodesInputError, conf_params, merge_extra_args, option_dict, parse_conf,
                                  write_codes_inputs)
from hybridsim.placement import read_alloc_file
from hybridsim.scenario import Scenario
from hybridsim_common.topology import Dragonfly, DragonflyShape

SMALL = dict(groups=9, routers_per_group=4, terminals_per_router=2, global_channels_per_router=2)


def scenario_b(synch="sequential", np_=1) -> Scenario:
    return Scenario.model_validate({
        "name": "B-72node-milc",
        "topology": SMALL,
        "jobs": [{"name": "milc", "ranks": 72, "iterations": 20,
                  "workload": {"kind": "milc", "dimension_sizes": [2, 2, 3, 6], "msg_size": 65536,
                               "compute_delay": 100}}],
        "sampling": {"interval": "50us"},
        "backend": {"kind": "codes", "codes": {"synch": synch, "np": np_}},
    })


def scenario_c(data: Path) -> Scenario:
    run = data / "C-1056node-milc-lammps-nn" / "hf-random-seq"
    return Scenario.model_validate({
        "name": "C",
        "jobs": [
            {"name": "milc", "ranks": 512, "iterations": 6,
             "workload": {"kind": "milc", "dimension_sizes": [4, 4, 4, 8], "msg_size": 49152}},
            {"name": "lammps", "ranks": 256, "iterations": 6,
             "workload": {"kind": "lammps", "num_x_replicas": 3, "num_y_replicas": 3, "num_z_replicas": 3}},
            {"name": "nn", "ranks": 256, "iterations": 6,
             "workload": {"kind": "nearest_neighbor", "dimension_sizes": [8, 8, 4], "msg_size": 32768}},
        ],
        "placement": {"policy": "file", "file": str(run / "alloc-random.conf")},
        "sampling": {"interval": "100us"},
        "backend": {"kind": "codes", "codes": {"sample_count": 400}},
    })


def scenario_e(data: Path) -> Scenario:
    run = data / "E-72node-milc-lammps-syn" / "hf-random-seq"
    return Scenario.model_validate({
        "name": "E",
        "topology": SMALL,
        "jobs": [
            {"name": "milc", "ranks": 36, "iterations": 1600,
             "workload": {"kind": "milc", "dimension_sizes": [3, 3, 2, 2], "msg_size": 49152}},
            {"name": "lammps", "ranks": 32, "iterations": 230,
             "workload": {"kind": "lammps", "num_x_replicas": 2, "num_y_replicas": 2, "num_z_replicas": 2}},
            {"name": "background", "ranks": 4,
             "workload": {"kind": "uniform_random", "msg_size": 4096, "interval": 4000}},
        ],
        "placement": {"policy": "file", "file": str(run / "alloc-random.conf")},
        "sampling": {"interval": "250us"},
        "backend": {"kind": "codes", "codes": {"sample_count": 100}},
    })


def reference_files(run: Path) -> dict:
    cmd = (run / "command.txt").read_text().split("#", 1)[0]
    toks = shlex.split(cmd)
    exe = next(i for i, t in enumerate(toks) if t.endswith("model-net-mpi-replay"))
    opts = option_dict(toks[exe + 1:])
    return {"mpirun": toks[:exe], "opts": opts,
            "conf": run / opts["--"], "workloads": run / opts["--workload_conf_file"],
            "alloc": run / opts["--alloc_file"]}


def normalised_opts(opts: dict) -> dict:
    out = dict(opts)
    for k in ("--workload_conf_file", "--alloc_file", "--"):
        out[k] = "<file>"
    return out


def workload_lines(path: Path, base: Path) -> list[tuple]:
    rows = []
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        ranks, app, qos, interval = line.split()
        body = json.loads((base / app).read_text()) if app.endswith(".json") else app
        rows.append((int(ranks), body, int(qos), float(interval)))
    return rows


def check_against(run: Path, written, expect_extra_opts: dict | None = None) -> None:
    ref = reference_files(run)
    # .conf: same sections, keys and values; connection files compared by name (paths differ)
    ours, theirs = parse_conf(written.conf.read_text()), parse_conf(ref["conf"].read_text())
    for sec in (ours, theirs):
        for key in ("intra-group-connections", "inter-group-connections"):
            sec["PARAMS"][key] = Path(sec["PARAMS"][key]).name
        for k, v in sec["PARAMS"].items():  # numbers compare as numbers ("2.0" == "2")
            try:
                sec["PARAMS"][k] = float(v)
            except ValueError:
                pass
    assert ours == theirs
    # workload list + SWM JSON content
    assert workload_lines(written.workload_list, written.dir) == workload_lines(ref["workloads"], run)
    # allocation
    assert read_alloc_file(written.alloc) == read_alloc_file(ref["alloc"])
    # command line options
    ours_opts = normalised_opts(option_dict(written.args))
    theirs_opts = normalised_opts(ref["opts"])
    for k, v in (expect_extra_opts or {}).items():
        assert ours_opts.pop(k) == v
    assert ours_opts == theirs_opts


def test_b_sequential_and_optimistic(codes_data, tmp_path):
    run = codes_data / "B-72node-milc" / "hf-seq"
    w = write_codes_inputs(scenario_b(), tmp_path / "seq", vt_samp_end=1e7, counting=(200, 50))
    # B ran without --sample-count (ROSS default 65,536); the bridge always bounds it
    check_against(run, w, expect_extra_opts={"--sample-count": "400"})
    # the connection files are CODES' own 72-node files, byte for byte
    assert w.intra.read_bytes() == (codes_data / "dfdally-72-intra").read_bytes()
    assert w.inter.read_bytes() == (codes_data / "dfdally-72-inter").read_bytes()

    opt = write_codes_inputs(scenario_b("optimistic", 2), tmp_path / "opt", vt_samp_end=1e7, counting=(200, 50))
    check_against(codes_data / "B-72node-milc" / "hf-opt-np2", opt, expect_extra_opts={"--sample-count": "400"})
    assert option_dict(opt.args)["--synch"] == "3"


def test_c_1056_three_jobs(codes_data, tmp_path):
    run = codes_data / "C-1056node-milc-lammps-nn" / "hf-random-seq"
    w = write_codes_inputs(scenario_c(codes_data), tmp_path, vt_samp_end=2e7, counting=(240, 50))
    check_against(run, w)
    assert w.intra.read_bytes() == (run.parent / "dfdally-1056-intra").read_bytes()
    assert w.inter.read_bytes() == (run.parent / "dfdally-1056-inter").read_bytes()
    lp = parse_conf(w.conf.read_text())["MODELNET_GRP"]
    assert lp == {"repetitions": "264", "nw-lp": "4", "modelnet_dragonfly_dally": "4",
                  "modelnet_dragonfly_dally_router": "1"}


def test_e_background_job(codes_data, tmp_path):
    run = codes_data / "E-72node-milc-lammps-syn" / "hf-random-seq"
    w = write_codes_inputs(scenario_e(codes_data), tmp_path, vt_samp_end=8e8, report_interval=0.05)
    check_against(run, w)
    assert w.workload_jsons[2] is None
    assert (tmp_path / "workloads.conf").read_text().splitlines()[2] == "4 synthetic1 0 4000"


def test_connection_files_from_shape_match_codes_generator(codes_data, tmp_path):
    topo = Dragonfly(DragonflyShape(33, 8, 4, 4))
    topo.write_codes_files(tmp_path / "i", tmp_path / "o")
    ref = codes_data / "C-1056node-milc-lammps-nn"
    assert (tmp_path / "i").read_bytes() == (ref / "dfdally-1056-intra").read_bytes()
    assert (tmp_path / "o").read_bytes() == (ref / "dfdally-1056-inter").read_bytes()


def test_default_sampling_end_covers_the_run():
    # B's MILC job ended at 8.84 ms (README); the estimate must not stop sampling before that
    from codes_bridge.writers import estimate_end_ns

    assert estimate_end_ns(scenario_b()) > 8.85e6
    w_args = option_dict(__import__("codes_bridge.writers", fromlist=["replay_args"]).replay_args(
        scenario_b(), workload_list="w", alloc="a", conf="c"))
    end = float(w_args["--vt-samp-end"])
    assert end % 50000 == 0 and end >= estimate_end_ns(scenario_b())


def test_non_default_delays_are_written():
    sc = scenario_b()
    sc.topology.router_delay = 50.0
    sc.topology.credit_delay = 2.0
    p = conf_params(sc, "i", "o")
    assert p["router_delay"] == "50" and p["credit_delay"] == "2"
    assert "cn_delay" not in p and "local_delay" not in p


@pytest.mark.parametrize("change, field", [
    ({"topology": {**SMALL, "num_vcs": 5}}, "num_vcs"),
    ({"topology": {**SMALL, "routing": "adaptive"}}, "routing"),
    ({"jobs": [{"name": "a", "ranks": 4, "iterations": 2, "workload": {"kind": "allreduce"}}]}, "allreduce"),
    ({"jobs": [{"name": "m", "ranks": 4, "iterations": 2, "compute": {"delay": "1us"},
                "workload": {"kind": "milc", "dimension_sizes": [2, 2]}}]}, "compute"),
    ({"jobs": [{"name": "m", "ranks": 4, "iterations": 2,
                "workload": {"kind": "milc", "dimension_sizes": [2, 2], "allreduce_count": 3}}]}, "allreduce"),
    ({"jobs": [{"name": "m", "ranks": 4, "iterations": 2, "workload": {"kind": "milc", "dimension_sizes": [2, 2]}},
               {"name": "b1", "ranks": 2, "workload": {"kind": "uniform_random", "msg_size": 1024}},
               {"name": "b2", "ranks": 2, "workload": {"kind": "uniform_random", "msg_size": 4096}}]}, "payload"),
    ({"jobs": [{"name": "b", "ranks": 2, "workload": {"kind": "uniform_random"}}]}, "end time"),
])
def test_refuses_what_codes_cannot_run(tmp_path, change, field):
    base = scenario_b().model_dump(by_alias=True)
    base.update(change)
    sc = Scenario.model_validate(base)
    with pytest.raises(CodesInputError, match=field):
        write_codes_inputs(sc, tmp_path / "x")
    assert not (tmp_path / "x" / "alloc.conf").exists()


def test_extra_args_replace_generated_options():
    args = ["--synch=1", "--vt-interval=50000", "--", "x.conf"]
    assert merge_extra_args(args, ["--vt-interval=1000", "--end=5"]) == [
        "--synch=1", "--vt-interval=1000", "--end=5", "--", "x.conf"]


@pytest.mark.parametrize("run, options, extra", [
    ("B-72node-milc/hf-seq", dict(vt_samp_end=1e7, counting=(200, 50)), {"--sample-count": "400"}),
    ("B-72node-milc/hf-opt-np2", dict(vt_samp_end=1e7, counting=(200, 50)), {"--sample-count": "400"}),
    ("C-1056node-milc-lammps-nn/hf-random-seq", dict(vt_samp_end=2e7, counting=(240, 50)), None),
    ("E-72node-milc-lammps-syn/hf-random-seq", dict(vt_samp_end=8e8, report_interval=0.05), None),
    # synthetic traffic only, stopped by --end (scenario: backend.embedded.end_time)
    ("A-72node-synthetic-uniform/seq", dict(vt_samp_end=2e6, counting=(20, 100), extra_params={
        "router_buffer_snapshots": '( "250e3", "500e3", "750e3", "1000e3", "1250e3", "1500e3", "1750e3" )',
        "save_packet_latency_path": "packet-latency-trace"}), {"--sample-count": "400"}),
])
def test_round_trip_through_scenario_from_codes(codes_data, tmp_path, run, options, extra):
    """CODES run -> scenario (codes_bridge.scenario_from_codes, written independently) -> CODES inputs again: the
    same files CODES ran."""
    from codes_bridge.scenario_from_codes import scenario_from_codes

    sc = scenario_from_codes(codes_data / run)
    w = write_codes_inputs(sc, tmp_path, **options)
    check_against(codes_data / run, w, extra)
