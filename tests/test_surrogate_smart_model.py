"""SMART and its parts: GCN (pruned = full = hand formula), Time-LLM pieces, the model's interface (fit / predict /
tune / save-load), the frozen LM staying frozen, and clear errors. Tiny graphs and 2-layer random LMs keep it fast."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from surrogate.base import SurrogateError
from surrogate.loading import load_surrogate
from surrogate.dataset import build_dataset
from surrogate.evaluate import mape
from surrogate.models.gcn import GCNEncoder, gcn_norm
from surrogate.models.timellm import RevIN, prompt_statistics, top_lags
from surrogate.registry import available, create
from surrogate.synthetic import make_synthetic_run
from test_surrogate_smart_llm import make_tiny_bert, make_tiny_gpt2, make_tiny_llama

FAST = dict(epochs=25, patience=25, lr=2e-3, tune_lr=5e-4, batch_windows=4, hidden=16, tf_ff=32, n_prototypes=16,
            d_model=16, llm_dtype="float32")


@pytest.fixture(scope="module")
def series(tmp_path_factory):
    d = tmp_path_factory.mktemp("smart")
    make_synthetic_run(d / "run", jobs=(("A", "milc", 4, 48),), period=4, noise=0.002, seed=3)
    ds = build_dataset(d / "run", train_frac=0.6, val_frac=0.1)
    return ds["A"]


@pytest.fixture(scope="module")
def lm_dirs(tmp_path_factory):
    return {"bert": make_tiny_bert(tmp_path_factory.mktemp("bert")),
            "gpt2": make_tiny_gpt2(tmp_path_factory.mktemp("gpt2")),
            "llama": make_tiny_llama(tmp_path_factory.mktemp("llama"))}


@pytest.fixture(scope="module")
def fitted(series, lm_dirs):
    torch.manual_seed(0)
    m = create("smart", llm_path=lm_dirs["bert"], llm_layers=2, **FAST)
    m._bind(series)
    before = {k: v.clone() for k, v in m.lm.model.state_dict().items()}
    info = m.fit(series, series.indices("train"), series.indices("val"))
    return m, before, info


# ------------------------------------------------------------------------------------------------------- GCN
def test_gcn_norm_matches_hand_formula_and_pruning_is_exact():
    rng = np.random.default_rng(0)
    n = 30
    edges = rng.integers(0, n, size=(2, 60))
    edges = edges[:, edges[0] != edges[1]]
    A = np.zeros((n, n))
    A[edges[0], edges[1]] = 1
    A[edges[1], edges[0]] = 1
    A += np.eye(n)
    dinv = 1 / np.sqrt(A.sum(1))
    ref = dinv[:, None] * A * dinv[None, :]
    M = gcn_norm(edges, n)
    np.testing.assert_allclose(M.toarray(), ref, rtol=1e-6)

    enc = GCNEncoder(5, 8, 3, M)
    x = torch.randn(2, n, 5)
    targets = np.array([7, 2, 19])
    out = enc(x, targets)
    assert out.shape == (2, 3, 8)
    # dense reference: H' = relu(Â H W + b), no relu after the last layer
    h = x.double()
    Ad = torch.from_numpy(ref)
    for k, lin in enumerate(enc.lins):
        h = Ad @ h @ lin.weight.double().t() + lin.bias.double()
        if k < 2:
            h = torch.relu(h)
    torch.testing.assert_close(out.double(), h[:, targets], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(enc.forward_full(x)[:, targets], out, atol=1e-6, rtol=1e-6)


def test_gcn_uses_project_adjacency(series):
    from surrogate.graphs import normalized_adjacency

    m = create("smart-nollm", hidden=8)
    m._bind(series)
    adj = normalized_adjacency(series.topology()).to_dense().numpy()
    np.testing.assert_allclose(m.net.gcn.adj.toarray(), adj)


# ------------------------------------------------------------------------------------------------ Time-LLM
def test_revin_round_trip_and_prompt_statistics():
    rv = RevIN()
    x = torch.tensor([[1.0, 2.0, 4.0, 8.0], [5.0, 5.0, 5.0, 5.0]])
    xn, mu, s = rv.norm(x)
    torch.testing.assert_close(rv.denorm(xn, mu, s), x)
    torch.testing.assert_close(xn[0].mean(), torch.tensor(0.0), atol=1e-6, rtol=0)
    st = prompt_statistics(torch.tensor([[0.0, 1.0, 2.0, 3.0]]), top_k=1)
    # torch.median is the lower middle value, as in Time-LLM
    assert (st["min"], st["max"], st["median"], st["trend"]) == ("0.0", "3.0", "1.0", "upward")
    t = torch.arange(16, dtype=torch.float32)
    assert int(top_lags(torch.sin(2 * np.pi * t / 4)[None], 1)[0, 0]) == 4


# ---------------------------------------------------------------------------------------------- the model
def test_registered():
    assert {"smart", "smart-nollm"} <= set(available())


def test_shapes_and_frozen_lm_unchanged_after_fit(series, fitted):
    m, before, info = fitted
    assert info["epochs"] >= 1
    after = m.lm.model.state_dict()
    assert before.keys() == after.keys()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert all(not p.requires_grad for p in m.lm.model.parameters())
    ctx = series.context(30, m.lookback, m.graph_lookback)
    p = m.predict(ctx)
    assert p.shape == (series.R,) and p.dtype == np.float64 and np.isfinite(p).all() and (p > 0).all()


def test_only_adapters_get_gradients(series, fitted):
    m, _, _ = fitted
    m2 = copy.deepcopy(m)
    assert m2.lm is m.lm  # the frozen LM is shared, not copied
    m2.net.train()
    loss = m2._loss_fn(series, 4)(np.array([10, 11]))
    loss.backward()
    assert all(p.grad is None for p in m2.lm.model.parameters())
    names = {n for n, p in m2.net.named_parameters() if p.grad is not None and p.grad.abs().sum() > 0}
    for part in ("gcn.lins.0", "temporal.layers.0", "timellm.patch_embedding", "timellm.mapping", "timellm.query",
                 "timellm.out", "timellm.head"):
        assert any(n.startswith(part) for n in names), part
    # the checkpoint holds only the trainable network, not the LM
    n_state = sum(v.numel() for v in m2._state().values())
    # + the buffers: log_scale and the linear base (2 L weights + bias)
    assert n_state == sum(p.numel() for p in m2.net.parameters()) + 1 + 2 * m2.lookback + 1
    assert not any(k.startswith(("lm.", "model.")) or "word_embeddings" in k for k in m2._state())


def test_save_load_identical_predictions(series, fitted, tmp_path):
    m, _, _ = fitted
    m.save(tmp_path / "ck")
    m2 = load_surrogate(tmp_path / "ck")
    assert m2.name == "smart" and m2.config() == m.config()
    for t in (20, 33, 40):
        ctx = series.context(t, m.lookback, m.graph_lookback)
        np.testing.assert_array_equal(m2.predict(ctx), m.predict(ctx))


def test_fits_periodic_series_better_than_last(series, fitted):
    m, _, _ = fitted
    ts = series.indices("train")[m.lookback:]
    pred = np.stack([m.predict(series.context(t - 1, m.lookback, m.graph_lookback)) for t in ts], axis=1)
    last = series.y[:, ts - 1]
    true = series.y[:, ts]
    print("fit MAPE", mape(pred, true), "LAST", mape(last, true))
    assert mape(pred, true) < 0.5 * mape(last, true), (mape(pred, true), mape(last, true))


def test_tune_changes_weights_and_keeps_lm(series, fitted):
    m, before, _ = fitted
    m2 = copy.deepcopy(m)
    w0 = m2.net.timellm.head.weight.clone()
    info = m2.tune(series, np.arange(30, 38))
    assert info["steps"] == m2.train_kw["tune_steps"]
    assert not torch.equal(w0, m2.net.timellm.head.weight)
    assert all(torch.equal(before[k], v) for k, v in m2.lm.model.state_dict().items())


@pytest.mark.parametrize("family", ["gpt2", "bert", "llama"])
def test_works_with_tiny_local_checkpoints(series, lm_dirs, family, tmp_path):
    m = create("smart", llm_path=lm_dirs[family], llm_layers=1, **{**FAST, "epochs": 2})
    m.fit(series, series.indices("train"), series.indices("val"))
    assert m.lm.model_type == family and m.lm.n_layers == 1
    ctx = series.context(25, m.lookback, m.graph_lookback)
    p = m.predict(ctx)
    assert p.shape == (series.R,) and np.isfinite(p).all()
    m.save(tmp_path / family)
    np.testing.assert_array_equal(load_surrogate(tmp_path / family).predict(ctx), p)


def test_nollm_ablation(series, tmp_path):
    m = create("smart-nollm", **{k: v for k, v in FAST.items() if k in ("epochs", "patience", "hidden", "tf_ff",
                                                                         "batch_windows", "lr")})
    m.fit(series, series.indices("train"), series.indices("val"))
    assert m.lm is None and "llm_path" not in m.config()
    ctx = series.context(30, m.lookback, m.graph_lookback)
    m.save(tmp_path / "n")
    np.testing.assert_array_equal(load_surrogate(tmp_path / "n").predict(ctx), m.predict(ctx))


def test_clear_errors(series, fitted, tmp_path):
    m, _, _ = fitted
    ctx = series.context(30, m.lookback, m.graph_lookback)
    bad = copy.deepcopy(ctx)
    bad.graphs = ctx.graphs.copy()
    bad.graphs[1, 5, 2] = np.nan
    with pytest.raises(SurrogateError, match=r"non-finite node feature .* index \(1, 5, 2\)"):
        m.predict(bad)
    other = copy.deepcopy(ctx)
    other.graphs = np.zeros((2, series.n_ports + 4, series.n_features), np.float32)
    with pytest.raises(SurrogateError, match="another topology"):
        m.predict(other)
    nohist = copy.deepcopy(ctx)
    nohist.history = np.full_like(ctx.history, np.nan)
    with pytest.raises(SurrogateError, match="no finite iteration time"):
        m.predict(nohist)
    with pytest.raises(SurrogateError, match="predict before fit"):
        create("smart", llm_path=None).predict(ctx)
    with pytest.raises(SurrogateError, match="not a directory"):
        create("smart", llm_path=str(tmp_path / "missing"), topology=m.topology, in_features=m.in_features)


def test_short_history_is_backfilled(series, fitted):
    m, _, _ = fitted
    ctx = series.context(2, m.lookback, m.graph_lookback)  # only 3 of 8 values known
    assert np.isnan(ctx.history).any()
    p = m.predict(ctx)
    assert np.isfinite(p).all()


def test_job_context_learns_the_job_trend(tmp_path):
    """All ranks share a job-level swing and each rank adds its own catch-up noise: in log space y[r, t] = m[t] + d[r, t]
    with m[t] = 1.6 m[t-1] - 0.8 m[t-2] + 0.02 e[t] (a damped oscillation, e.g. another job's traffic coming and going)
    and d[r, t] = -0.6 d[r, t-1] + 0.03 e[r, t] (a rank that waited catches up). One rank's look-back is too noisy to
    follow m; the job's mean look-back averages 12 ranks. The generating process gives the oracle prediction
    exp(1.6 m[t-1] - 0.8 m[t-2] - 0.6 d[r, t-1]) whose error is the innovations alone (2.8 % MAPE here). The
    job-context base (default) must get near it and clearly beat the same model without it (measured: 3.2 % vs 4.1 %).""" 
    rng = np.random.default_rng(7)
    R, T = 12, 200
    m = np.zeros(T)
    for t in range(2, T):
        m[t] = 1.6 * m[t - 1] - 0.8 * m[t - 2] + 0.02 * rng.standard_normal()
    d = np.zeros((R, T))
    for t in range(1, T):
        d[:, t] = -0.6 * d[:, t - 1] + 0.03 * rng.standard_normal(R)
    y = 1000.0 * np.exp(m[None, :] + d)
    make_synthetic_run(tmp_path / "run", jobs=(("A", "nn", R, T),), times={"A": y}, seed=3)
    s = build_dataset(tmp_path / "run", train_frac=0.5, val_frac=0.1)["A"]
    np.testing.assert_allclose(s.y, y)
    test = s.indices("test")
    oracle = 1000.0 * np.exp(1.6 * m[None, test - 1] - 0.8 * m[None, test - 2] - 0.6 * d[:, test - 1])
    errs = {}
    for jc in (True, False):
        mdl = create("smart-nollm", epochs=40, patience=40, hidden=16, tf_ff=32, batch_windows=4, lr=5e-3,
                     job_context=jc)
        assert mdl.config()["job_context"] is jc
        mdl.fit(s, s.indices("train"), s.indices("val"))
        pred = np.stack([mdl.predict(s.context(t - 1, mdl.lookback, mdl.graph_lookback)) for t in test], axis=1)
        errs[jc] = mape(pred, y[:, test])
    e_oracle = mape(oracle, y[:, test])
    print("job context", errs[True], "without", errs[False], "oracle", e_oracle)
    assert errs[True] < 1.3 * e_oracle
    assert errs[True] < 0.85 * errs[False]


def _random_graphs(ctx, seed):
    out = copy.deepcopy(ctx)
    out.graphs = np.random.default_rng(seed).standard_normal(ctx.graphs.shape).astype(np.float32) * 3.0
    return out


@pytest.mark.parametrize("name", ["smart-nollm", "smart"])
def test_no_graph_ablation_ignores_graphs(series, lm_dirs, name, tmp_path):
    """``use_graph=False`` builds no GCN / temporal transformer: replacing the graphs by random ones leaves the
    prediction bit-identical, while the default model's prediction moves. The weights are randomised first (the
    untrained head starts near zero, which would hide the graph branch either way)."""
    llm = dict(llm_path=lm_dirs["bert"], llm_layers=1, llm_dtype="float32", d_model=16, n_prototypes=16) \
        if name == "smart" else {}
    preds = {}
    for use_graph in (True, False):
        m = create(name, hidden=16, tf_ff=32, epochs=2, patience=2, batch_windows=4, use_graph=use_graph, **llm)
        assert m.config()["use_graph"] is use_graph
        m.fit(series, series.indices("train"), series.indices("val"))  # the training path runs without graphs too
        assert m.tune(series, series.indices("test")[:3])["steps"] == m.train_kw["tune_steps"]
        gen = torch.Generator().manual_seed(1)
        with torch.no_grad():
            for p in m.net.parameters():
                if p.requires_grad:
                    p.add_(0.3 * torch.randn(p.shape, generator=gen))
        names = set(m.net.state_dict())
        assert any(k.startswith("gcn.") for k in names) is use_graph
        assert any(k.startswith("temporal.") for k in names) is use_graph
        ctx = series.context(30, m.lookback, m.graph_lookback)
        p0, p1, p2 = (m.predict(c) for c in (ctx, _random_graphs(ctx, 1), _random_graphs(ctx, 2)))
        assert np.isfinite(p0).all() and (p0 > 0).all()
        preds[use_graph] = p0
        if use_graph:
            assert np.abs(p1 / p0 - 1).max() > 1e-3 and np.abs(p2 / p1 - 1).max() > 1e-3
        else:
            np.testing.assert_array_equal(p1, p0)
            np.testing.assert_array_equal(p2, p0)
        m.save(tmp_path / f"ck{use_graph}")
        m2 = load_surrogate(tmp_path / f"ck{use_graph}")
        assert m2.name == name and m2.config() == m.config() and m2.config()["use_graph"] is use_graph
        np.testing.assert_array_equal(m2.predict(ctx), p0)
    assert preds[True].shape == preds[False].shape == (series.R,)


def test_use_graph_parses_from_a_spec_and_defaults_on():
    from surrogate.loading import split_spec

    assert create("smart-nollm").config()["use_graph"] is True
    assert split_spec("smart-nollm:use_graph=false") == ("smart-nollm", {"use_graph": False})


@pytest.mark.parametrize("name", ["smart-nollm", "smart"])
def test_no_port_features_ablation_ignores_the_loads_but_keeps_the_graph(series, lm_dirs, name, tmp_path):
    """``port_features=False`` keeps the GCN and the temporal transformer but feeds them a constant per port: two
    different port-feature tensors give bit-identical predictions with it, different ones without it (same seed, same
    randomised weights, so the switch is the only difference). The weights are randomised first (the untrained head
    starts near zero, which would hide the graph branch either way); the switch survives a checkpoint round trip."""
    llm = dict(llm_path=lm_dirs["bert"], llm_layers=1, llm_dtype="float32", d_model=16, n_prototypes=16) \
        if name == "smart" else {}
    for port_features in (True, False):
        m = create(name, hidden=16, tf_ff=32, epochs=2, patience=2, batch_windows=4, port_features=port_features,
                   **llm)
        assert m.config()["port_features"] is port_features
        m.fit(series, series.indices("train"), series.indices("val"))
        assert m.tune(series, series.indices("test")[:3])["steps"] == m.train_kw["tune_steps"]
        gen = torch.Generator().manual_seed(1)
        with torch.no_grad():
            for p in m.net.parameters():
                if p.requires_grad:
                    p.add_(0.3 * torch.randn(p.shape, generator=gen))
        names = set(m.net.state_dict())
        assert any(k.startswith("gcn.") for k in names) and any(k.startswith("temporal.") for k in names)
        ctx = series.context(30, m.lookback, m.graph_lookback)
        p0, p1, p2 = (m.predict(c) for c in (ctx, _random_graphs(ctx, 1), _random_graphs(ctx, 2)))
        assert np.isfinite(p0).all() and (p0 > 0).all()
        if port_features:
            assert np.abs(p1 / p0 - 1).max() > 1e-3 and np.abs(p2 / p1 - 1).max() > 1e-3
        else:
            np.testing.assert_array_equal(p1, p0)
            np.testing.assert_array_equal(p2, p0)
        m.save(tmp_path / f"ck{port_features}")
        m2 = load_surrogate(tmp_path / f"ck{port_features}")
        assert m2.config() == m.config() and m2.config()["port_features"] is port_features
        np.testing.assert_array_equal(m2.predict(ctx), p0)


def test_port_features_parses_from_a_spec_and_defaults_on():
    from surrogate.loading import split_spec

    assert create("smart").config()["port_features"] is True
    assert split_spec("smart:port_features=false") == ("smart", {"port_features": False})
    assert create("smart-nollm", port_features=False).net is None  # built at the first fit, switch kept in config
