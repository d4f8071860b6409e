"""Causal graph windows: the node features of iteration t hold only port samples whose window ends by t's end, so the
graph that helps predict iteration t+1 never sees t+1's time (offline builder and online graphs share the rule)."""

import numpy as np
import pytest

from hybridsim_common.records import PortSamples
from hybridsim_common.topology import Dragonfly, DragonflyShape
from surrogate.graphs import STATS, node_features, window_bounds
from surrogate.online_graphs import OnlineGraphs

T_END = np.array([100.0, 200.0, 300.0, 400.0])   # windows (0,100], (100,200], (200,300], (300,400]
VALUES = np.arange(1.0, 5.0, dtype=np.float32).reshape(4, 1, 1)  # one port, one feature: sample s holds s + 1


def _stats(start, end):
    """Node features of one iteration [start, end] of a one-rank job on a one-port graph, as {stat: value}."""
    f = node_features(T_END, 100.0, VALUES, np.array([0]), np.array([[start]]), np.array([[end]]))
    assert f.shape == (1, 1, len(STATS))
    return dict(zip(STATS, f[0, 0].tolist()))


def test_window_overlapping_next_iteration_is_excluded():
    # iteration [150, 260]; iteration t+1 starts at 260. Window (200, 300] overlaps t but ends inside t+1: excluded.
    s = _stats(150.0, 260.0)
    assert s == {"min": 2.0, "max": 2.0, "mean": 2.0, "q25": 2.0, "q75": 2.0, "last": 2.0}
    lo, hi = window_bounds(T_END, 100.0, np.array([150.0]), np.array([260.0]))
    assert (lo.tolist(), hi.tolist()) == ([1], [2])


def test_windows_ending_inside_or_at_the_end_are_kept():
    # iteration [150, 300]: windows (100,200] and (200,300] both end by 300
    s = _stats(150.0, 300.0)
    assert (s["min"], s["max"], s["mean"], s["last"]) == (2.0, 3.0, 2.5, 3.0)
    assert s["q25"] == pytest.approx(2.25) and s["q75"] == pytest.approx(2.75)


def test_short_iteration_uses_the_latest_finished_window_and_none_before_the_first():
    # [210, 260]: no window ends inside; the latest one ending before it, (100, 200], stands in
    assert _stats(210.0, 260.0)["last"] == 2.0
    # [10, 50]: no window has ended yet -> nothing observed, features 0
    assert set(_stats(10.0, 50.0).values()) == {0.0}


def test_online_graph_freezes_without_the_look_ahead_sample():
    """The online graphs fed the same stream block by block: the sample that ends after the iteration never enters,
    and the graph is final as soon as a sample ending at or after the iteration's end has arrived."""
    topo = Dragonfly(DragonflyShape(3, 2, 1, 1))
    P = topo.n_ports
    og = OnlineGraphs(topo, {0: ("a", np.array([0]), 2)})
    port = int(og.rank_port(0)[0])

    def block(s):
        v = np.zeros((1, P, 1), np.float32)
        v[0, :, 0] = 10.0 * (s + 1)   # every port: 10, 20, 30, 40
        return PortSamples(T_END[s:s + 1], 100.0, topo.radix, ("x",), v)

    og.on_record(0, 0, 0, 150.0, 260.0)
    og.on_samples(block(0))
    og.on_samples(block(1))
    assert not og.is_final(0, 0)
    og.on_samples(block(2))          # ends at 300 >= 260: the graph is final, and this sample is not in it
    assert og.is_final(0, 0)
    g = og.raw(0, 0)
    assert g[port].tolist() == [20.0] * len(STATS)
    og.on_samples(block(3))
    assert og.raw(0, 0)[port].tolist() == [20.0] * len(STATS)


def test_graphs_that_observed_nothing_do_not_scale_the_features():
    """A graph built before any window ended is all zero: the normaliser leaves it out, and it normalises to 0 (the
    features' mean) instead of to a value far below every real graph."""
    from surrogate.graphs import fit_normaliser, normalise, observed

    real = np.array([[[1.0, 10.0]], [[3.0, 30.0]]])        # (T=2, P=1, F=2)
    raw = np.concatenate([np.zeros((1, 1, 2)), real])     # iteration 0 observed nothing
    assert observed(raw).tolist() == [False, True, True]
    mu, sd = fit_normaliser(raw)
    z = np.log1p(real[:, 0, :])
    np.testing.assert_allclose(mu, z.mean(axis=0))
    np.testing.assert_allclose(sd, z.std(axis=0))
    x = normalise(raw, mu, sd)
    assert x[0].tolist() == [[0.0, 0.0]]
    np.testing.assert_allclose(x[1:, 0, :], (z - mu) / sd, rtol=1e-6)
    assert normalise(np.zeros((1, 2)), mu, sd).tolist() == [[0.0, 0.0]]   # one graph (P, F)


def test_online_normaliser_waits_for_an_iteration_that_observed_a_window():
    topo = Dragonfly(DragonflyShape(3, 2, 1, 1))
    P = topo.n_ports
    og = OnlineGraphs(topo, {0: ("a", np.array([0]), 3)})
    og.on_record(0, 0, 0, 0.0, 60.0)      # ends before the first window (0, 100] does
    # before any sample has arrived (a stream job's first iterations, shorter than the interval): nothing observed,
    # the fit waits (this raised "no port samples have arrived" and stopped smart-nollm on examples/stream-1056.yaml)
    assert not og.can_normalise(0, [0])
    v = np.ones((1, P, 1), np.float32)
    og.on_samples(PortSamples(T_END[:1], 100.0, topo.radix, ("x",), v))
    assert og.is_final(0, 0) and not og.raw(0, 0).any()
    assert not og.can_normalise(0, [0])
    with pytest.raises(Exception, match="observed a sampling window"):
        og.fit_normaliser(0, [0])
    og.on_record(0, 0, 1, 60.0, 120.0)    # holds the window ending at 100
    assert og.can_normalise(0, [0, 1])
    assert og.fit_normaliser(0, [0, 1]) == 1 and og.jobs[0].norm_iterations == [1]
    assert og.graph(0, 0).tolist() == np.zeros((P, len(STATS))).tolist()
