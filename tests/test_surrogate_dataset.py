"""Surrogate datasets: hand-computed node features, nearest-active-port rule, chronological splits, train-only
normalisers, deterministic rebuild, bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.sparse.csgraph import shortest_path

from hybridsim_common.records import PORT_FEATURES, IterationRecord, PortSamples, read_ports, write_iterations, write_ports
from hybridsim_common.rundir import JobDescription, RunDescription, RunDir, read_description, write_description
from hybridsim_common.topology import Dragonfly
from surrogate.dataset import DatasetError, build_dataset, load_dataset, make_splits
from surrogate.graphs import (STATS, nearest_active_port, normalized_adjacency, random_walk_matrix, window_bounds,
                              window_stats)
from surrogate.synthetic import SMALL_SHAPE, make_synthetic_run

TOPO = Dragonfly(SMALL_SHAPE)  # 3 groups x 2 routers x 2 terminals, h=1: radix 4, 24 ports


def _hand_run(path, T=12, interval=100.0, seed=1):
    """One job 'J' (2 ranks on terminals 0 and 11) with hand-set iteration windows and random port samples."""
    rng = np.random.default_rng(seed)
    # rank 0: iterations of 170 ns starting at 250 + 170 i ... ; rank 1: 230 ns from 0
    recs = []
    bounds = {}
    for r, (t0, d) in enumerate(((250.0, 170.0), (0.0, 230.0))):
        for i in range(T):
            s, e = t0 + i * d, t0 + (i + 1) * d
            recs.append(IterationRecord("J", 0, r, i, s, e))
            bounds[r, i] = (s, e)
    S = 40
    t_end = interval * (np.arange(S) + 1)
    vals = rng.random((S, TOPO.n_ports, len(PORT_FEATURES))).astype(np.float32) * 100
    rd = RunDir.create(path, kind="synthetic", force=True, argv=["t"])
    write_description(rd.path, RunDescription(SMALL_SHAPE, [JobDescription("J", "milc", {}, 2, T, [0, 11], None)],
                                              interval, list(PORT_FEATURES)))
    write_iterations(recs, rd.file("iterations.parquet"))
    write_ports(PortSamples(t_end, interval, SMALL_SHAPE.radix, PORT_FEATURES, vals), rd.file("ports.parquet"))
    rd.complete()
    return vals, bounds


def _expected_stats(vals, idx, port):
    w = vals[idx, port, :].astype(np.float64)  # (k, F)
    cols = [w.min(0), w.max(0), w.mean(0), np.quantile(w, 0.25, axis=0), np.quantile(w, 0.75, axis=0), w[-1]]
    return np.stack(cols, axis=1).reshape(-1)   # feature-major, STATS order


def test_window_bounds_by_hand():
    t_end = 100.0 * (np.arange(10) + 1)  # windows (0,100], (100,200], ...
    lo, hi = window_bounds(t_end, 100.0, np.array([250.0, 0.0, 300.0, 5000.0]), np.array([420.0, 230.0, 400.0, 6000.0]))
    # causal: windows that overlap the interval and end by its end (surrogate/graphs.py)
    # [250,420]: (200,300] and (300,400]; (400,500] overlaps but ends after 420 -> samples 2,3
    # [0,230]: (0,100], (100,200]; (200,300] ends after 230 -> samples 0,1
    # [300,400]: exactly (300,400]; (200,300] ends exactly at the start and is not counted -> sample 3
    # beyond the last sample -> the last sample (the latest window ending by 6000)
    assert lo.tolist() == [2, 0, 3, 9]
    assert hi.tolist() == [4, 2, 4, 10]


def test_window_stats_match_numpy_quantiles():
    rng = np.random.default_rng(3)
    vals = rng.random((12, 5, 2)).astype(np.float32)
    port = np.array([0, 4, 2, 2])
    lo = np.array([0, 3, 5, 11])
    hi = np.array([1, 7, 9, 12])
    got = window_stats(vals, port, lo, hi)
    for n in range(4):
        exp = _expected_stats(vals, np.arange(lo[n], hi[n]), port[n])
        np.testing.assert_allclose(got[n], exp, rtol=1e-6, atol=1e-6)
    # hand case: samples 1, 2, 4, 10 -> q25 at position 0.75 = 1.75, q75 at 2.25 = 5.5
    v = np.array([1, 2, 4, 10], np.float32).reshape(4, 1, 1)
    s = window_stats(v, np.array([0]), np.array([0]), np.array([4]))[0]
    assert dict(zip(STATS, s.tolist())) == pytest.approx({"min": 1, "max": 10, "mean": 4.25, "q25": 1.75,
                                                          "q75": 5.5, "last": 10})


def test_nearest_active_port_by_hand_and_bfs():
    # terminal 0 -> router 0 port 2 = id 2; terminal 11 -> router 5 port 3 = id 23
    assert TOPO.terminal_port(0) == 2 and TOPO.terminal_port(11) == 23
    near, dist = nearest_active_port(TOPO, np.array([23, 2]))
    # router 0's other ports are 1 hop from port 2; its global port 1 leads to router 3 (port 13): 2 hops
    assert near[[0, 1, 3]].tolist() == [2, 2, 2] and dist[[0, 1, 3]].tolist() == [1, 1, 1]
    assert near[13] == 2 and dist[13] == 2
    # router 2 port 9 is reached by router 5's global port 21 (2 hops from 23); port 8 is 3 hops from 23, 4 from 2
    assert near[9] == 23 and dist[9] == 2
    assert near[8] == 23 and dist[8] == 3
    # tie: port 2 is 1 hop from both 0 and 1 (same router) -> the lower id
    near2, _ = nearest_active_port(TOPO, np.array([1, 0]))
    assert near2[2] == 0 and near2[3] == 0 and near2[1] == 1
    # independent check against all-pairs shortest paths, ties -> lower id
    e = TOPO.port_graph_edges()
    A = sp.coo_matrix((np.ones(e.shape[1]), (e[0], e[1])), shape=(TOPO.n_ports,) * 2)
    D = shortest_path(A, unweighted=True)
    for active in ([2, 23], [0, 1], [5, 14, 22], [7]):
        act = np.array(sorted(active))
        exp = act[np.argmin(D[act, :], axis=0)]
        got, gd = nearest_active_port(TOPO, np.array(active))
        assert got.tolist() == exp.tolist()
        assert gd.tolist() == D[act, :].min(axis=0).astype(int).tolist()


def test_adjacency_normalisation():
    A = normalized_adjacency(TOPO).to_dense().numpy()
    e = TOPO.port_graph_edges()
    M = np.eye(TOPO.n_ports)
    M[e[0], e[1]] = 1
    d = M.sum(1)
    np.testing.assert_allclose(A, M / np.sqrt(d[:, None] * d[None, :]), rtol=1e-6)
    np.testing.assert_allclose(A, A.T, atol=1e-7)
    P = random_walk_matrix(TOPO).to_dense().numpy()
    np.testing.assert_allclose(P.sum(1), 1.0, rtol=1e-6)
    assert (np.diag(P) == 0).all()
    # radix-1 router neighbours + one link partner for every non-terminal port
    assert P[2].nonzero()[0].tolist() == [0, 1, 3]


def test_features_hand_computed(tmp_path):
    vals, bounds = _hand_run(tmp_path / "run")
    ds = build_dataset(tmp_path / "run")
    js = ds["J"]
    assert js.x.shape == (12, 24, 36) and js.y.shape == (2, 12)
    assert js.rank_port.tolist() == [2, 23]
    assert js.mask.nonzero()[0].tolist() == [2, 23]
    np.testing.assert_allclose(js.y[0], 170.0)
    np.testing.assert_allclose(js.y[1], 230.0)
    near, _ = nearest_active_port(TOPO, np.array([2, 23]))
    t_end = 100.0 * (np.arange(40) + 1)
    for t in (0, 3, 11):
        raw = js.raw_features(t)
        for port in (2, 23, 13, 8, 0, 17):
            r = 0 if near[port] == 2 else 1
            s, e = bounds[r, t]
            idx = np.flatnonzero((t_end > s) & (t_end <= e))  # windows overlapping [s, e] and ending by e
            assert idx.size  # iterations of 170 and 230 ns always hold a window end (interval 100)
            np.testing.assert_allclose(raw[port], _expected_stats(vals, idx, port), rtol=2e-4, atol=1e-3)
    # rank 0, iteration 0 covers [250, 420]: samples 2, 3 (hand); sample 4 (400, 500] ends inside iteration 1
    raw0 = js.raw_features(0)[2].reshape(6, 6)
    np.testing.assert_allclose(raw0[0, 5], vals[3, 2, 0], rtol=1e-5)       # bytes_last = sample 3
    np.testing.assert_allclose(raw0[0, 2], vals[2:4, 2, 0].mean(), rtol=1e-5)  # bytes_mean over samples 2..3


def test_splits_chronological_and_normaliser_train_only(tmp_path):
    assert make_splits(60) == {"train": (0, 18), "val": (18, 24), "test": (24, 60)}
    assert make_splits(100, 0.5, 0.2) == {"train": (0, 50), "val": (50, 70), "test": (70, 100)}
    with pytest.raises(DatasetError):
        make_splits(2)
    make_synthetic_run(tmp_path / "a", seed=5)
    a = build_dataset(tmp_path / "a")
    # same run with the port samples after the training period blown up x1000: the normaliser must not change
    pa = read_ports(tmp_path / "a" / "ports.parquet")
    js = a["A"]
    t_train_end = js.start[:, js.split["train"][1]].max()  # end of the last train iteration of any rank
    late = pa.t_end - pa.interval > t_train_end + 2 * pa.interval
    vals = pa.values.copy()
    vals[late] *= 1000.0
    write_ports(PortSamples(pa.t_end, pa.interval, pa.radix, pa.features, vals), tmp_path / "a" / "ports.parquet")
    b = build_dataset(tmp_path / "a")
    for name in ("A",):
        np.testing.assert_array_equal(a[name].norm_mean, b[name].norm_mean)
        np.testing.assert_array_equal(a[name].norm_std, b[name].norm_std)
        tr = slice(*a[name].split["train"])
        np.testing.assert_array_equal(a[name].x[tr], b[name].x[tr])
        assert not np.allclose(a[name].x[-5:], b[name].x[-5:])
        # the train split is standardised: mean 0, std 1 per feature (over train iterations x ports)
        z = a[name].x[tr].reshape(-1, a[name].n_features).astype(np.float64)
        np.testing.assert_allclose(z.mean(0), 0.0, atol=1e-4)
        ok = a[name].norm_std != 1.0
        np.testing.assert_allclose(z.std(0)[ok], 1.0, atol=1e-3)


def test_rebuild_identical_and_roundtrip(tmp_path):
    make_synthetic_run(tmp_path / "run", seed=2)
    d1 = build_dataset(tmp_path / "run", tmp_path / "d1")
    build_dataset(tmp_path / "run", tmp_path / "d2")
    for f in sorted(p.name for p in (tmp_path / "d1").iterdir()):
        assert (tmp_path / "d1" / f).read_bytes() == (tmp_path / "d2" / f).read_bytes(), f
    back = load_dataset(tmp_path / "d1")
    assert list(back.jobs) == ["A", "B"]
    for n in back.jobs:
        for k in ("x", "y", "mask", "rank_port", "norm_mean", "norm_std"):
            np.testing.assert_array_equal(getattr(back[n], k), getattr(d1[n], k))
        assert back[n].split == d1[n].split and back[n].workload == d1[n].workload
    assert back["A"].workload == "milc"


def test_context_windows(tmp_path):
    make_synthetic_run(tmp_path / "run", seed=2)
    js = build_dataset(tmp_path / "run")["A"]
    c = js.context(5, 8, 2)
    assert c.history.shape == (4, 8) and np.isnan(c.history[:, :2]).all()
    np.testing.assert_array_equal(c.history[:, 2:], js.y[:, 0:6])
    np.testing.assert_array_equal(c.graphs, js.x[4:6])
    c0 = js.context(0, 3, 3)
    np.testing.assert_array_equal(c0.graphs, js.x[[0, 0, 0]])
    assert c0.history[:, -1].tolist() == js.y[:, 0].tolist() and c0.iteration == 0


def test_bad_inputs(tmp_path):
    with pytest.raises(DatasetError, match="not found"):
        build_dataset(tmp_path / "nope")
    make_synthetic_run(tmp_path / "run")
    (tmp_path / "run" / "ports.parquet").unlink()
    with pytest.raises(DatasetError, match="ports.parquet"):
        build_dataset(tmp_path / "run")
    # NaN in the port samples
    make_synthetic_run(tmp_path / "nan")
    pa = read_ports(tmp_path / "nan" / "ports.parquet")
    v = pa.values.copy()
    v[3, 5, 1] = np.nan
    write_ports(PortSamples(pa.t_end, pa.interval, pa.radix, pa.features, v), tmp_path / "nan" / "ports.parquet")
    with pytest.raises(DatasetError, match="non-finite value at sample 3.*port 5.*busy_ns"):
        build_dataset(tmp_path / "nan")
    # dataset folder problems
    make_synthetic_run(tmp_path / "ok")
    build_dataset(tmp_path / "ok", tmp_path / "ds")
    with pytest.raises(DatasetError, match="no meta.json"):
        load_dataset(tmp_path / "ok")
    f = tmp_path / "ds" / "job-A.safetensors"
    raw = bytearray(f.read_bytes())
    raw[-7] ^= 0xFF
    f.write_bytes(bytes(raw))
    with pytest.raises(DatasetError, match="checksum"):
        load_dataset(tmp_path / "ds")
    with pytest.raises(DatasetError, match="corrupt"):
        load_dataset(tmp_path / "ds", verify=False) if False else _truncate_and_load(f, tmp_path / "ds")
    (tmp_path / "ds" / "meta.json").write_text("{not json")
    with pytest.raises(DatasetError, match="corrupt JSON"):
        load_dataset(tmp_path / "ds")


def _truncate_and_load(f, ds):
    f.write_bytes(f.read_bytes()[:100])
    return load_dataset(ds, verify=False)


def test_nan_features_in_dataset_rejected(tmp_path):
    from safetensors.numpy import load_file, save_file

    make_synthetic_run(tmp_path / "run")
    build_dataset(tmp_path / "run", tmp_path / "ds")
    f = tmp_path / "ds" / "job-B.safetensors"
    arr = load_file(str(f))
    arr["x"][7, 3, 2] = np.nan
    save_file(arr, str(f))
    with pytest.raises(DatasetError, match="non-finite node feature at iteration 7, port 3"):
        load_dataset(tmp_path / "ds", verify=False)
    meta = json.loads((tmp_path / "ds" / "meta.json").read_text())
    assert meta["topology"] == {"groups": 3, "routers_per_group": 2, "terminals_per_router": 2,
                                "global_channels_per_router": 1}


def _tiny_scenario():
    from hybridsim.scenario import Scenario

    return Scenario.model_validate({
        "seed": 7, "topology": {"groups": 3, "routers_per_group": 2, "terminals_per_router": 2,
                                "global_channels_per_router": 1},
        "jobs": [{"name": "m", "ranks": 4, "iterations": 12,
                  "workload": {"kind": "milc", "dimension_sizes": [2, 2, 1, 1], "msg_size": 1024}},
                 {"name": "l", "ranks": 4, "iterations": 12, "workload": {"kind": "lammps"}},
                 {"name": "bg", "ranks": 2, "workload": {"kind": "uniform_random", "msg_size": 256,
                                                         "interval": 20000}}],
        "placement": {"policy": "random"}, "sampling": {"interval": 20000}})


def test_engine_run_describes_itself(tmp_path):
    """A fresh engine run writes description.json; its content is what the scenario says, recomputed here from the
    scenario (terminals = place_jobs, volumes = workload_volumes), and the dataset built from the run attaches each
    rank to its terminal's port and scales by those volumes."""
    from hybridsim.placement import place_jobs
    from hybridsim.runner import run_scenario, workload_volumes
    from surrogate.volumes import dataset_volumes, relative_volumes

    sc = _tiny_scenario()
    run_scenario(sc, tmp_path / "run", progress=False)
    desc = read_description(tmp_path / "run")
    placed = place_jobs(sc, TOPO)
    assert desc.shape == SMALL_SHAPE
    assert [(j.name, j.workload, j.ranks, j.iterations) for j in desc.jobs] == \
        [("m", "milc", 4, 12), ("l", "lammps", 4, 12), ("bg", "uniform_random", 2, None)]
    assert desc.jobs[0].params["dimension_sizes"] == [2, 2, 1, 1] and desc.jobs[0].params["msg_size"] == 1024
    assert desc.jobs[2].params == {"msg_size": 256, "interval": 20000.0}
    assert [j.terminals for j in desc.jobs] == [p.tolist() for p in placed]
    assert placed[0].tolist() != [0, 1, 2, 3]                 # random placement: the order matters
    for i in (0, 1):
        assert desc.jobs[i].volumes == workload_volumes(sc, i, 12).tolist()
    assert desc.jobs[2].volumes is None
    assert desc.sampling_interval == 20000.0 and desc.port_features == list(read_ports(tmp_path / "run" /
                                                                                        "ports.parquet").features)
    ds = build_dataset(tmp_path / "run")
    assert list(ds.jobs) == ["m", "l"]                         # the background job has no iterations
    for i, name in enumerate(("m", "l")):
        assert ds[name].rank_port.tolist() == [TOPO.terminal_port(int(t)) for t in placed[i]]
    assert (ds["m"].workload, ds["l"].workload) == ("milc", "lammps")
    v = dataset_volumes(ds)
    assert list(v) == ["l"]                                   # MILC sends the same every iteration
    np.testing.assert_array_equal(v["l"], relative_volumes(workload_volumes(sc, 1, 12)))
    assert v["l"][10] > 1.1 * v["l"][9]                       # LAMMPS' neighbour exchange every 10 steps


def test_run_directory_without_description(tmp_path, capsys):
    """Run directories from before descriptions (or with a damaged one) are refused with the file and field named."""
    import copy
    import re

    from hybridsim.cli import main

    make_synthetic_run(tmp_path / "run")
    d = tmp_path / "run" / "description.json"
    good = json.loads(d.read_text())
    d.unlink()
    with pytest.raises(DatasetError, match=re.escape(f"{d}: missing (run directories written before")):
        build_dataset(tmp_path / "run")
    assert main(["dataset", "build", str(tmp_path / "run"), "-o", str(tmp_path / "ds")]) == 2
    assert "description.json: missing" in capsys.readouterr().err and not (tmp_path / "ds").exists()

    def edited(path, value):
        data = copy.deepcopy(good)
        *keys, last = path
        obj = data
        for k in keys:
            obj = obj[k]
        if value is KeyError:
            del obj[last]
        else:
            obj[last] = value
        return data

    for path, value, needle in (
            (("jobs", 1, "terminals"), KeyError, "missing field 'jobs[1].terminals'"),
            (("topology", "groups"), KeyError, "missing field 'topology.groups'"),
            (("sampling",), KeyError, "missing field 'sampling'"),
            (("topology", "groups"), "3", "field 'topology.groups' must be int, not str"),
            (("topology", "groups"), 0, "field 'topology.groups' must be >= 1, not 0"),
            (("jobs", 0, "terminals"), [0, "x", 2, 3], "field 'jobs[0].terminals[1]' must be a number"),
            (("jobs", 0, "terminals"), None, "field 'jobs[0].terminals' is null: the terminals of job 'A' are unknown"),
            (("jobs", 0, "terminals"), [0, 1], "field 'jobs[0].terminals' lists 2 terminals for the 4 ranks of job 'A'"),
            (("jobs", 0, "name"), "Z", "no job 'A' (jobs: Z, B)"),
            (("sampling", "interval_ns"), 50.0, "does not match description.json (interval 50 ns"),
            (("topology", "terminals_per_router"), 3, "has radix 4 but the topology in description.json has radix 5"),
            (("version",), 2, "description version 2 not supported")):
        d.write_text(json.dumps(edited(path, value)))
        with pytest.raises(DatasetError, match=re.escape(needle)):
            build_dataset(tmp_path / "run")
    d.write_text(json.dumps(good))
    assert list(build_dataset(tmp_path / "run").jobs) == ["A", "B"]


def test_describe_run_restores_the_description_of_an_old_run_directory(tmp_path, capsys):
    """``hybridsim describe-run`` writes, for a run directory without description.json (as written before runs
    described themselves), the same description the run itself wrote; it refuses CODES imports and an existing
    file without --force."""
    from hybridsim.cli import main
    from hybridsim.runner import run_scenario

    run_scenario(_tiny_scenario(), tmp_path / "run", progress=False)
    path = tmp_path / "run" / "description.json"
    written = json.loads(path.read_text())
    path.unlink()
    with pytest.raises(Exception, match="describe-run"):
        build_dataset(tmp_path / "run")
    assert main(["describe-run", str(tmp_path / "run")]) == 0
    assert json.loads(path.read_text()) == written
    assert main(["describe-run", str(tmp_path / "run")]) == 2          # exists: --force to write it again
    assert "already exists" in capsys.readouterr().err
    man = json.loads((tmp_path / "run" / "manifest.json").read_text())
    man["kind"] = "codes-import"
    (tmp_path / "run" / "manifest.json").write_text(json.dumps(man))
    assert main(["describe-run", str(tmp_path / "run"), "--force"]) == 2
    assert "import-codes" in capsys.readouterr().err
