"""Surrogate baselines and evaluation: MAPE by hand, the online-tuning schedule, LSTM/DCRNN learning a periodic
series, checkpoints reloading to identical predictions, bad checkpoints."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from surrogate.base import Surrogate, SurrogateError
from surrogate.loading import load_surrogate
from surrogate.dataset import build_dataset
from surrogate.evaluate import evaluate, format_table, mape, parse_ft, run_online
from surrogate.models.history import Last
from surrogate.registry import create
from surrogate.synthetic import make_synthetic_run
from surrogate.train import load_checkpoints, train_dataset

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def periodic(tmp_path_factory):
    """Noise-free period-4 series (two jobs), 48 / 40 iterations."""
    d = tmp_path_factory.mktemp("periodic")
    make_synthetic_run(d / "run", jobs=(("A", "milc", 3, 48), ("B", "lammps", 2, 40)), period=4, noise=0.0)
    return build_dataset(d / "run", d / "ds", train_frac=0.5, val_frac=0.1)


def test_mape_hand_case():
    assert mape(np.array([110.0, 90.0]), np.array([100.0, 100.0])) == pytest.approx(10.0)
    assert mape(np.array([[1.0, 3.0], [2.0, 2.0]]), np.array([[2.0, 2.0], [2.0, 4.0]])) == pytest.approx(
        (50 + 50 + 0 + 50) / 4)
    with pytest.raises(ValueError):
        mape(np.ones(2), np.zeros(2))
    assert parse_ft("inf") == math.inf and parse_ft("8") == 8
    with pytest.raises(ValueError):
        parse_ft("0")


def test_last_on_known_series(periodic):
    js = periodic["A"]
    r = run_online(Last(), js, ft=math.inf)
    a, b = js.split["test"]
    exp = np.mean(np.abs(js.y[:, a - 1:b - 1] - js.y[:, a:b]) / js.y[:, a:b]) * 100
    assert r["mape"] == pytest.approx(exp)
    np.testing.assert_array_equal(r["pred"], js.y[:, a - 1:b - 1])


class _Spy(Surrogate):
    name = "spy"
    lookback = 2

    def __init__(self):
        self.windows = []
        self.contexts = []

    def tune(self, dataset, window_idx, **kw):
        self.windows.append(list(window_idx))
        return {}

    def predict(self, ctx):
        self.contexts.append(ctx.iteration)
        return ctx.history[:, -1]


def test_online_tuning_schedule(periodic):
    js = periodic["B"]  # 40 iterations: test = 24..39
    a, b = js.split["test"]
    assert (a, b) == (24, 40)
    s = _Spy()
    run_online(s, js, ft=4)
    # tuned before predicting t = 28, 32, 36 on the 4 iterations before each (ground truth already known)
    assert s.windows == [[24, 25, 26, 27], [28, 29, 30, 31], [32, 33, 34, 35]]
    assert s.contexts == list(range(23, 39))  # predicting t from the context of t - 1
    s2 = _Spy()
    run_online(s2, js, ft=math.inf)
    assert s2.windows == []


def _train_mape(model, js):
    a, b = 4, js.split["train"][1]
    preds = np.stack([model.predict(js.context(t - 1, model.lookback, model.graph_lookback if model.needs_graphs
                                                else 0)) for t in range(a, b)], axis=1)
    return mape(preds, js.y[:, a:b])


def test_lstm_and_dcrnn_learn_periodic_series(periodic):
    js = periodic["A"]
    base = _train_mape(Last(), js)
    assert base > 10  # the period-4 sine swings +-20 %: LAST is far off
    torch.manual_seed(0)
    lstm = create("lstm", k=8, hidden=16, epochs=80, patience=80, lr=1e-2, batch_size=8)
    lstm.fit(js, js.indices("train"), None)
    assert _train_mape(lstm, js) < 2.0
    dc = create("dcrnn", graph_lookback=4, k=8, hidden=8, epochs=30, patience=30, lr=1e-2, batch_size=8)
    dc.fit(js, js.indices("train"), None)
    assert _train_mape(dc, js) < 2.0
    # and it generalises to the test split of this noise-free series
    assert run_online(dc, js, ft=math.inf)["mape"] < 3.0


def test_checkpoints_reload_identical(periodic, tmp_path):
    for name, cfg in (("lstm", {"epochs": 3}), ("dcrnn", {"epochs": 2, "hidden": 4}), ("ridge", {})):
        res = train_dataset(periodic, name, tmp_path / name, config=cfg)
        mname, models = load_checkpoints(tmp_path / name, periodic, expect_model=name)
        assert mname == name and set(models) == {"A", "B"}
        for job in ("A", "B"):
            js = periodic[job]
            m0, m1 = res["models"][job], models[job]
            Lg = m0.graph_lookback if m0.needs_graphs else 0
            for t in (5, 20, js.T - 2):
                ctx = js.context(t, m0.lookback, Lg)
                np.testing.assert_array_equal(m0.predict(ctx), m1.predict(ctx))
        # single-model checkpoint folder too
        m = res["models"]["A"]
        m.save(tmp_path / f"{name}-single")
        m2 = load_surrogate(tmp_path / f"{name}-single")
        ctx = periodic["A"].context(30, m.lookback, m.graph_lookback if m.needs_graphs else 0)
        np.testing.assert_array_equal(m.predict(ctx), m2.predict(ctx))


def test_bad_checkpoints(periodic, tmp_path):
    train_dataset(periodic, "lstm", tmp_path / "lstm", config={"epochs": 1})
    with pytest.raises(SurrogateError, match="model 'lstm', not 'dcrnn'"):
        load_checkpoints(tmp_path / "lstm", periodic, expect_model="dcrnn")
    with pytest.raises(SurrogateError, match="checkpoint not found"):
        load_checkpoints(tmp_path / "missing", periodic)
    # weights of another model under an lstm config
    train_dataset(periodic, "dcrnn", tmp_path / "dc", config={"epochs": 1, "hidden": 4})
    (tmp_path / "dc" / "A" / "config.json").write_text((tmp_path / "lstm" / "A" / "config.json").read_text())
    with pytest.raises(SurrogateError, match="do not fit"):
        load_checkpoints(tmp_path / "dc", periodic)
    # corrupt weights
    f = tmp_path / "lstm" / "B" / "model.safetensors"
    f.write_bytes(f.read_bytes()[:50])
    with pytest.raises(SurrogateError, match="corrupt weights"):
        load_checkpoints(tmp_path / "lstm", periodic)


def test_topology_mismatch(periodic, tmp_path):
    from hybridsim_common.topology import DragonflyShape

    other = DragonflyShape(groups=5, routers_per_group=2, terminals_per_router=1, global_channels_per_router=2)
    make_synthetic_run(tmp_path / "run", shape=other, jobs=(("A", "milc", 3, 30),))
    ds_other = build_dataset(tmp_path / "run")
    train_dataset(periodic, "dcrnn", tmp_path / "dc", config={"epochs": 1, "hidden": 4})
    with pytest.raises(SurrogateError, match="topology"):
        load_checkpoints(tmp_path / "dc", ds_other)
    m = load_surrogate(tmp_path / "dc" / "A")
    with pytest.raises(SurrogateError, match="topology|ports"):
        m.predict(ds_other["A"].context(10, m.lookback, m.graph_lookback))
    with pytest.raises(SurrogateError, match="topology"):
        m.tune(ds_other["A"], np.arange(5, 9))


def test_evaluate_report(periodic):
    rep = evaluate(periodic, ["last", "mean"], fts=["4", "inf"])
    assert len(rep["results"]) == 2 * 2 * 2
    table = format_table(rep)
    assert "last" in table and "A" in table.splitlines()[0]
    r = {(x["model"], x["ft"], x["job"]): x for x in rep["results"]}
    assert r[("last", 4, "A")]["mape"] == r[("last", "inf", "A")]["mape"]  # nothing to tune
    with pytest.raises(SurrogateError, match="neither a checkpoint folder nor a model name"):
        evaluate(periodic, ["nosuchmodel"])


def test_ridge_fits_every_ranks_gap_free_windows_at_once():
    """Ridge's fit takes the gap-free windows of every rank in one pass (issue 31: the hybrid loop refits it at every
    warm-up iteration and window end): the windows a rank-by-rank fit takes, in the same order, so the same
    coefficients bit for bit. Hand case, k = 2 (windows of 3): rank 0 has 5 usable values (3 windows), rank 1 a gap
    at t = 2 (none of the 3 windows over it) and a value <= 0 at t = 4, so only its window t = 5..7 counts."""
    from surrogate.models.history import Ridge

    class Series:
        y = np.array([[100.0, 110.0, 105.0, 120.0, 100.0, np.nan, np.nan, np.nan],
                      [200.0, 210.0, np.nan, 190.0, -1.0, 205.0, 195.0, 215.0]])

    m = Ridge(k=2)
    assert m._windows(Series.y).tolist() == [[100.0, 110.0, 105.0], [110.0, 105.0, 120.0], [105.0, 120.0, 100.0],
                                              [205.0, 195.0, 215.0]]
    assert m.fit(Series, list(range(8))) == {"windows": 4}
    ref = Ridge(k=2)
    assert ref.fit_series(list(Series.y)) == 4   # one series at a time
    assert np.array_equal(m.coef, ref.coef)
    # the closed form on those windows: relative to each window's last input, one lag, no intercept
    w = np.array([[100.0, 110.0, 105.0], [110.0, 105.0, 120.0], [105.0, 120.0, 100.0], [205.0, 195.0, 215.0]])
    x, y = w[:, 0] / w[:, 1] - 1.0, w[:, 2] / w[:, 1] - 1.0
    assert m.coef[0] == pytest.approx((x @ y / 4) / (x @ x / 4 + 0.1))
    # too short to hold a window: nothing fitted, the coefficients kept
    assert Ridge(k=2).fit(Series, [0, 1]) == {"windows": 0}
