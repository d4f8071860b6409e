"""The pretrained surrogate: features, online bias, pretraining across a corpus held out by whole run, the shipped
checkpoint, the co-runner load the hybrid loop gives it, and ``bench --pure``."""

import json
import math
from pathlib import Path

import numpy as np
import pytest

import surrogate
from hybridsim.cli import main
from hybridsim.runner import build_controller, run_scenario
from hybridsim.scenario import parse_scenario
from surrogate.base import Context, JobInfo, SurrogateError
from surrogate.models.pretrained import FEATURE_NAMES, LOOKBACK, N_FEATURES, SHIPPED, Pretrained, features
from surrogate.online import OnlineSeries
from surrogate.pretrain import job_tables, run_examples, split_runs

SHAPE = type("Shape", (), {"groups": 9, "routers_per_group": 4, "terminals_per_router": 2})


def test_job_info_from_a_description():
    # terminals 0-7 are group 0, 8-15 group 1: a job on 0, 1, 9 spans 2 of 9 groups
    info = JobInfo.of("milc", 3, 10, [100.0, 300.0], [0, 1, 9], SHAPE)
    assert (info.groups, info.machine_groups, info.machine_terminals) == (2, 9, 72)
    assert info.bytes_per_iteration == 200.0
    assert info.load(18) == 0.25
    assert JobInfo.of("nn", 3, 10, None, None, SHAPE).groups == 9
    assert info.placed([0, 8, 16, 24]).groups == 4


def test_untrained_net_is_the_geometric_mean_of_the_look_back():
    m = Pretrained(weights="none")
    h = np.array([[100.0, 121.0, np.nan], [50.0, 50.0, 50.0], [np.nan, np.nan, np.nan]])
    p = m.predict(Context("j", "milc", h, iteration=5))
    assert p[0] == pytest.approx(110.0) and p[1] == pytest.approx(50.0)
    assert math.isnan(p[2])  # nothing to predict from: the loop falls back to the last truth


def test_padded_columns_are_not_history_and_features_are_relative():
    info = JobInfo.of("lammps", 4, 40, [10.0], None, SHAPE)
    h = np.array([[np.nan, 200.0, 220.0]])
    X, level = features(h, np.array([-1, 3, 7]), 9, info, np.array([np.nan, 0.5, 0.25]), 0.0)
    assert X.shape == (1, N_FEATURES)
    assert level[0] == pytest.approx(0.5 * (np.log(200) + np.log(220)))
    names = FEATURE_NAMES
    f = dict(zip(names, X[0].astype(float)))
    assert f[f"lag{LOOKBACK - 1}_present"] == 1 and f[f"lag{LOOKBACK - 3}_present"] == 0
    assert f["present_frac"] == pytest.approx(2 / LOOKBACK)
    assert f["log_gap"] == pytest.approx(np.log1p(10 - 7) / 4)       # predicting iteration 10 from truth at 7
    assert f["load_last"] == pytest.approx(0.25) and f["load_now"] == 0 and f["load_change"] == pytest.approx(-0.25)
    assert f["kind_lammps"] == 1 and f["kind_milc"] == 0
    # without a JobInfo (gRPC service, CODES' director) the context's workload kind still counts
    Xn, _ = features(h, None, 9, None, None, None, "lammps")
    assert Xn[0, names.index("kind_lammps")] == 1 and Xn[0, names.index("has_info")] == 0
    # scale-free: the same job 1000x slower has the same features
    X2, level2 = features(h * 1000, np.array([-1, 3, 7]), 9, info, np.array([np.nan, 0.5, 0.25]), 0.0)
    np.testing.assert_allclose(X2, X, atol=1e-6)
    assert level2[0] == pytest.approx(level[0] + np.log(1000))


def test_online_bias_is_the_shrunk_mean_one_step_log_error():
    """Per truth iteration: log(mean over ranks of the truth / median over ranks of the one-step predictions)."""
    m = Pretrained(weights="none", tune_prior=2.0)
    y = np.full((2, 6), np.nan)
    y[:, 0] = 100.0
    y[:, 3] = 110.0     # predicted from iteration 0 (level 100): log error log(1.1)
    y[:, 5] = 100.0 * 1.1 ** 0.5   # predicted from 0 and 3 (level 100 * 1.1 ** 0.5): error 0
    s = OnlineSeries("j", "milc", y)
    m.fit(s, [0])  # iteration 0 has nothing before it
    assert m.bias == 0.0
    m.tune(s, [0, 1, 2, 3])
    assert m.bias == pytest.approx(np.log(1.1) / (1 + 2))
    m.tune(s, [3, 4, 5])    # 3 counts once
    assert m.bias == pytest.approx(np.log(1.1) / (2 + 2))
    assert Pretrained(weights="none", tune=False).tune(s, [3])["targets"] == 0
    # skewed ranks: predictions 100 and 100 (median 100), truths 100 and 140 (mean 120): error log(1.2)
    y = np.array([[100.0, 100.0], [100.0, 140.0]])
    m = Pretrained(weights="none", tune_prior=0.0)
    m.fit(OnlineSeries("j", "nearest_neighbor", y), [0, 1])
    assert m.bias == pytest.approx(np.log(1.2))


def test_split_by_whole_run_is_disjoint_deterministic_and_complete():
    names = [f"{i:04d}" for i in range(20)]
    a = split_runs(names, 0, 0.2, 0.15)
    assert a == split_runs(names, 0, 0.2, 0.15) and a != split_runs(names, 1, 0.2, 0.15)
    assert (len(a["test"]), len(a["val"]), len(a["train"])) == (3, 4, 13)
    assert sorted(a["test"] + a["val"] + a["train"]) == names
    with pytest.raises(SurrogateError):
        split_runs(names, 0, 0.6, 0.5)


# ----------------------------------------------------------------------------------------------- corpus, pretrain
SPEC = """\
name: pt
seed: 3
runs: 5
base:
  output: {ports: false}
space:
  topology:
    - {groups: 3, routers_per_group: 2, terminals_per_router: 2, global_channels_per_router: 1}
  placement: [random, contiguous]
  jobs: [2, 2]
  workloads: [allreduce, nearest_neighbor]
  ranks: [2, 4]
  iterations: [4, 9]
  msg_size: [1024, 8192]
  background: [0, 1]
  background_ranks: [1, 2]
"""


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    d = tmp_path_factory.mktemp("corpus")
    (d / "spec.yaml").write_text(SPEC)
    assert main(["corpus", str(d / "spec.yaml"), "-o", str(d / "c"), "--no-progress"]) == 0
    return d / "c"


def test_job_tables_load_counts_the_jobs_running_when_an_iteration_starts(corpus):
    for run in sorted((corpus / "runs").iterdir()):
        m = json.loads((run / "manifest.json").read_text())["scenario"]
        bg = sum(j["ranks"] for j in m["jobs"] if j.get("iterations") is None)
        fg = {j["name"]: j["ranks"] for j in m["jobs"] if j.get("iterations") is not None}
        import pyarrow.parquet as pq

        t = pq.read_table(run / "iterations.parquet").to_pydict()
        job_of = np.array(t["job"])
        start, end, itn = (np.array(t[k]) for k in ("start", "end", "iteration"))
        for job in job_tables(run):
            (other,) = [n for n in fg if n != job["name"]]
            mine = job_of == job["name"]
            starts = np.array([start[mine & (itn == i)].min() for i in range(itn[mine].max() + 1)])
            expect = (bg + fg[other] * (starts < end[job_of == other].max())) / 12
            np.testing.assert_allclose(job["load"], expect)
            assert job["y"].shape == (fg[job["name"]], len(starts))


def test_examples_are_causal(corpus):
    """Changing a job's iteration times after t0 changes no input of an example whose last truth is t0."""
    run = sorted((corpus / "runs").iterdir())[0]
    ex = run_examples(run, np.random.default_rng(0))
    assert ex["X"].shape[1] == N_FEATURES and len(ex["X"]) == len(ex["target"]) > 0
    import surrogate.pretrain as sp

    orig = sp.job_tables

    def later_doubled(run_dir):
        jobs = orig(run_dir)
        for j in jobs:
            j["y"] = j["y"].copy()
            j["y"][:, 1:] *= 2.0   # every iteration after the first
        return jobs

    sp.job_tables = later_doubled
    try:
        ex2 = run_examples(run, np.random.default_rng(0))
    finally:
        sp.job_tables = orig
    z = ex["t0"] == 0
    assert z.any()
    np.testing.assert_array_equal(ex2["X"][z], ex["X"][z])     # inputs from iteration 0 only
    np.testing.assert_allclose(ex2["target"][z], ex["target"][z] + np.log(2.0))


def test_pretrain_cli_writes_a_loadable_checkpoint_with_held_out_runs(corpus, tmp_path, capsys):
    out = tmp_path / "ckpt"
    assert main(["pretrain", str(corpus), "-o", str(out), "--model", "pretrained", "--epochs", "5",
                 "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert "test:" in text and "checkpoint written" in text
    rep = json.loads((out / "pretrain.json").read_text())
    sp = rep["split"]
    assert len(sp["test"]) == 1 and len(sp["val"]) == 1 and len(sp["train"]) == 3
    assert not set(sp["test"]) & set(sp["train"] + sp["val"])
    assert rep["test"]["examples"] > 0 and rep["epochs_run"] <= 5
    m = surrogate.load(str(out)).new()
    assert isinstance(m, Pretrained)
    h = np.array([[100.0, 100.0]])
    assert np.isfinite(m.predict(Context("j", "nearest_neighbor", h, iteration=1))).all()
    # the same command again is refused without --force; other models cannot be pretrained
    assert main(["pretrain", str(corpus), "-o", str(out), "--no-progress"]) == 2
    assert main(["pretrain", str(corpus), "-o", str(tmp_path / "x"), "--model", "ridge", "--no-progress"]) == 2
    assert "cannot be trained across runs" in capsys.readouterr().err
    assert main(["pretrain", str(tmp_path / "none"), "-o", str(tmp_path / "y"), "--no-progress"]) == 2
    assert "corpus.json: missing" in capsys.readouterr().err
    assert not (tmp_path / "y").exists()


def test_shipped_checkpoint_is_small_trained_and_addressable_by_name():
    size = sum(p.stat().st_size for p in SHIPPED.iterdir())
    assert size <= 20 * 2**20
    rep = json.loads((SHIPPED / "pretrain.json").read_text())
    assert rep["model"] == "pretrained" and rep["test"]["examples"] > 0
    assert not set(rep["split"]["test"]) & set(rep["split"]["train"] + rep["split"]["val"])
    m = surrogate.load("pretrained").new()
    assert float(np.abs(m._w[-1][0]).sum()) > 0     # a trained output layer (the untrained one is zero)
    base = surrogate.load("pretrained:weights=none").new()
    assert float(np.abs(base._w[-1][0]).sum()) == 0
    with pytest.raises(SurrogateError, match="no weights"):
        Pretrained(weights=str(SHIPPED / "missing.safetensors"))


# ----------------------------------------------------------------------------------------------- in the loop
TWO = """\
name: two
seed: 3
topology: {groups: 9, routers_per_group: 4, terminals_per_router: 2, global_channels_per_router: 2}
jobs:
  - {name: short, ranks: 8, iterations: 3, workload: {kind: nearest_neighbor, dimension_sizes: [2, 2, 2], msg_size: 4096}}
  - {name: long, ranks: 8, iterations: 14, workload: {kind: nearest_neighbor, dimension_sizes: [2, 2, 2], msg_size: 4096}}
  - {name: noise, ranks: 2, workload: {kind: uniform_random, msg_size: 1024, interval: 20000}}
placement: {policy: random}
surrogate: {model: pretrained}
controller: {policy: aligned, params: {warmup: 1, ft: 4}}
"""


def test_loop_gives_the_model_job_info_and_the_co_runner_load(tmp_path):
    sc = parse_scenario(TWO)
    ctl = build_controller(sc)
    _, res, summary = run_scenario(sc, tmp_path / "run", mode="hybrid", progress=False, controller=ctl)
    long = ctl.states[1]
    assert long.info.workload == "nearest_neighbor" and long.info.ranks == 8 and long.info.machine_terminals == 72
    # the short job's last iteration ends at its completion time; before that the long job meets its 8 ranks and
    # the background's 2, after it the background's alone
    short_end = summary["jobs"]["short"]["completion_time_ns"]
    starts = {}
    for r in res.records:
        if r.job_id == 1:
            starts[r.iteration] = min(starts.get(r.iteration, math.inf), r.start)
    expect = np.array([(2 + (8 if starts[i] < short_end else 0)) / 72 for i in range(long.n_iterations)])
    np.testing.assert_allclose(long.load, expect, atol=1e-12)
    assert long.load[0] == pytest.approx(10 / 72) and long.load[-1] == pytest.approx(2 / 72)
    assert summary["hybrid"]["counts"]["inference_calls"] > 0


def test_bench_reuses_a_pure_run_of_the_same_scenario(tmp_path, capsys):
    scen = tmp_path / "two.yaml"
    scen.write_text(TWO)
    assert main(["bench", str(scen), "-o", str(tmp_path / "b1"), "--no-progress"]) == 0
    assert main(["bench", str(scen), "-o", str(tmp_path / "b2"), "--no-progress", "--pure",
                 str(tmp_path / "b1" / "pure")]) == 0
    a, b = (json.loads((tmp_path / d / "bench.json").read_text()) for d in ("b1", "b2"))
    assert not (tmp_path / "b2" / "pure").exists()
    assert b["pure"]["events"] == a["pure"]["events"] and b["pure"]["run"].endswith("pure")
    for k in ("theoretical_speedup", "iteration_mape_pct", "max_completion_error_pct"):
        assert b["runs"][0][k] == a["runs"][0][k]
    other = tmp_path / "other.yaml"
    other.write_text(TWO.replace("seed: 3", "seed: 4"))
    capsys.readouterr()
    assert main(["bench", str(other), "-o", str(tmp_path / "b3"), "--no-progress", "--pure",
                 str(tmp_path / "b1" / "pure")]) == 2
    assert "another scenario" in capsys.readouterr().err
    assert main(["bench", str(scen), "-o", str(tmp_path / "b4"), "--no-progress", "--pure",
                 str(tmp_path / "b1" / "00-aligned")]) == 2
    assert not (tmp_path / "b3").exists() and not (tmp_path / "b4").exists()


def test_co_runner_load_counts_what_an_iteration_meets():
    """Hand case: jobs a (8 ranks), b (4 ranks, predicted), c (2 ranks, through its last iteration), background d
    (6 ranks) on 72 terminals. A predicted iteration of a meets what the pure run has (b, d); a simulated one meets b
    only if predicted jobs leave their load behind (keep_background)."""
    from controllers.builtin import Periodic
    from hybridsim_common.backend import Mode
    from hybridsim.hybrid import ControllerSettings, HybridController
    from surrogate.models.history import Last

    jobs = [("a", "milc", 8, 5), ("b", "milc", 4, 5), ("c", "milc", 2, 1), ("d", "uniform_random", 6, None)]
    infos = {k: JobInfo.of("milc", r, n, None, None, SHAPE) for k, (_, _, r, n) in enumerate(jobs) if n}
    for keep, expect_sim in ((True, 10 / 72), (False, 6 / 72)):
        ctl = HybridController(jobs, Periodic(), Last(), ControllerSettings(keep_background=keep), infos=infos)
        ctl.states[1].modes = [Mode.SIMULATE, Mode.PREDICT]
        ctl.states[2].done_count[-1] = 2
        assert ctl._corunner_load(0, Mode.PREDICT) == pytest.approx(10 / 72)
        assert ctl._corunner_load(0, Mode.SIMULATE) == pytest.approx(expect_sim)
    assert math.isnan(HybridController(jobs, Periodic(), Last())._corunner_load(0, Mode.PREDICT))


def test_pretrain_on_two_corpora_splits_each_on_its_own(corpus, tmp_path):
    import shutil

    from surrogate.pretrain import pretrain

    other = tmp_path / "other"
    shutil.copytree(corpus, other)
    _, rep = pretrain([corpus, other], epochs=2, score_test=False)
    for part in ("test", "val", "train"):
        owners = {n.split("/")[0] for n in rep["split"][part]}
        assert owners == {corpus.name, "other"}
    assert rep["test"] is None and "test" not in rep["examples"]
    with pytest.raises(SurrogateError, match="share a folder name"):
        pretrain([corpus, corpus], epochs=1)


# ----------------------------------------------------------------------------------------------- hostile corpora
def _edit_table(run, fn):
    import pyarrow as pa
    import pyarrow.parquet as pq

    t = pq.read_table(run / "iterations.parquet")
    cols = fn({c: t.column(c).to_numpy(zero_copy_only=False) for c in t.column_names})
    pq.write_table(pa.table(cols), run / "iterations.parquet")


def _where(t, col, when, value):
    return {**t, col: np.where(when(t), value, t[col])}


HOSTILE = [
    ("NaN times", lambda c: _edit_table(c / "runs" / "0000", lambda t: _where(
        t, "end", lambda t: t["iteration"] == 1, np.nan)), [], "non-finite start or end times"),
    ("rank 10^6", lambda c: _edit_table(c / "runs" / "0000", lambda t: _where(
        t, "rank", lambda t: t["rank"] == 1, 10**6)), [], "rank 1000000"),
    ("iteration 2^31-1", lambda c: _edit_table(c / "runs" / "0000", lambda t: _where(
        t, "iteration", lambda t: t["iteration"] == 1, 2**31 - 1)), [], "iteration 2147483647 lies outside"),
    ("end before start", lambda c: _edit_table(c / "runs" / "0001", lambda t: _where(
        t, "end", lambda t: t["iteration"] == 2, 0.0)), [], "ends before it starts"),
    ("deep corpus.json", lambda c: (c / "corpus.json").write_text("[" * 100_000 + "]" * 100_000), [],
     "nested too deep"),
    ("corpus.json a list", lambda c: (c / "corpus.json").write_text("[]"), [], "not a corpus index written by"),
    ("another program's corpus.json", lambda c: (c / "corpus.json").write_text(json.dumps(
        {"runs": [{"dir": "runs/0000", "status": "completed"}]})), [], "not a corpus index written by"),
    ("runs without ids", lambda c: (c / "corpus.json").write_text(json.dumps(
        {"kind": "corpus", "runs": [{"dir": "runs/0000", "status": "completed"}]})), [],
     "field 'runs' must be a list of objects with an integer 'id'"),
    ("run outside the corpus", lambda c: (c / "corpus.json").write_text(json.dumps(
        {"kind": "corpus", "runs": [{"id": 0, "dir": "../../etc", "status": "completed"}]})), [],
     "must be a folder inside the corpus"),
    ("--epochs 0", lambda c: None, ["--epochs", "0"], "epochs must be an integer >= 1, got 0"),
    ("--hidden 0", lambda c: None, ["--hidden", "0"], "hidden must be an integer >= 1"),
    ("--val-frac nan", lambda c: None, ["--val-frac", "nan"], "val_frac must be a number"),
]


@pytest.mark.parametrize("name, edit, more, msg", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_pretrain_on_a_hostile_corpus_is_a_clean_error(corpus, tmp_path, capsys, name, edit, more, msg):
    """Exit 2 naming the file (or option) and what is wrong; no traceback, no checkpoint, nothing half-written."""
    import shutil

    c = tmp_path / "c"
    shutil.copytree(corpus, c)
    edit(c)
    more = more or ["--epochs", "2"]
    assert main(["pretrain", str(c), "-o", str(tmp_path / "ckpt"), "--no-progress", *more]) == 2
    assert msg in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c"]  # no checkpoint, no staging folder, no lock


def test_pretrain_says_which_runs_it_leaves_out(corpus, tmp_path, capsys):
    """A run corpus.json does not list as completed is left out, and the command says so (it used to be silent)."""
    import shutil

    c = tmp_path / "c"
    shutil.copytree(corpus, c)
    meta = json.loads((c / "corpus.json").read_text())
    meta["runs"][2]["status"] = "failed"
    (c / "corpus.json").write_text(json.dumps(meta))
    assert main(["pretrain", str(c), "-o", str(tmp_path / "ckpt"), "--epochs", "2", "--no-progress"]) == 0
    assert f"{c}: 1 run(s) not completed, left out: runs/0002 (failed)" in capsys.readouterr().err
    rep = json.loads((tmp_path / "ckpt" / "pretrain.json").read_text())
    assert rep["left_out"] == {c.name: ["runs/0002 (failed)"]}
    assert "0002" not in rep["split"]["train"] + rep["split"]["val"] + rep["split"]["test"]
