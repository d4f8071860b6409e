"""What a model sees during a hybrid run: one feed per job, chosen once from the model (:func:`feed_for`).

The controller (:class:`hybridsim.hybrid.HybridController`) keeps the schedule: modes, the per-job timeline of truth
and predictions, the window-edge marks and the fallback. A feed turns that timeline (read through :class:`Timeline`)
and, for graph models, the streamed port samples into what the model reads: the :class:`~surrogate.base.Context` of a
prediction, the :class:`OnlineSeries` and target indices of a fit or tune, and whether a fit has anything to learn
from yet. A new model kind is a new feed; the controller does not change.

* :class:`HistoryFeed` (LAST, MEAN, EWMA, ridge, LSTM): contexts from each rank's iteration times; with
  ``history="truth"`` (the default) the latest simulated, complete, non-edge iterations only, ``"window"`` only
  those of the latest simulated stretch, ``"mixed"`` the last ``lookback`` iterations (truth where simulated, the
  model's own prediction where not, edges NaN). Its series is the truth table (R, n_iterations), NaN where an
  iteration was predicted, has not run or is a window edge; every index is a target. Fitted when the policy first
  answers PREDICT.
* :class:`GraphFeed` (SMART, smart-nollm, DCRNN): port graphs from an
  :class:`~surrogate.online_graphs.OnlineGraphs`. Contexts carry the mixed history, the last ``graph_lookback``
  graphs, ``rank_port`` and ``mask``; a predicted iteration, where nothing is simulated, reuses the graph of the
  latest simulated iteration before it. The series is dense, because these models index it like a dataset
  (``y[:, t]`` and ``x[t - Lg + 1 .. t]`` around every target): it spans the iterations every rank has completed,
  ``y`` is the truth where simulated and the model's own prediction where not (what its contexts held), and the
  targets are restricted to simulated, non-edge iterations, so a model never trains on its own predictions. Fitted
  at the job's first prediction (every rank is parked then, so every warm-up iteration is complete); the graph
  normaliser is fitted once, at that fit. A graph model learns iteration t from t-1, so after a warm-up of one
  iteration it cannot fit yet (:meth:`GraphFeed.can_fit`).

With ``volumes`` (relative bytes each iteration sends, mean 1), histories and series are divided by the
iteration's volume; the controller multiplies predictions back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Protocol

import numpy as np

from .base import Context, SeriesView, Surrogate, SurrogateError
from .online_graphs import OnlineGraphs

HISTORY_MODES = ("mixed", "truth", "window")


class Timeline(Protocol):
    """What a feed reads of the controller's per-job timeline (``hybridsim.timeline.JobState``). Every method costs
    O(what it returns), not O(iterations run): a feed's work per prediction is bounded by its look-back."""

    job: str
    workload: str
    job_id: int
    n_ranks: int
    n_iterations: int
    truth: np.ndarray        # (R, n_iterations) simulated iteration times, NaN elsewhere
    info: object             # the job's surrogate.base.JobInfo, or None
    load: np.ndarray         # (n_iterations,) co-runner load when each iteration started (NaN: not yet)
    flow: np.ndarray         # (n_iterations,) flow-model iteration time beside those co-runners (NaN: none)
    done_count: list         # (n_iterations,) ranks that have finished each iteration
    modes: list              # decided modes so far

    def simulated(self, n: int) -> np.ndarray:
        """(n,) bool: which of the first ``n`` decided iterations were simulated."""

    def series(self, upto: int, lo: int = 0) -> np.ndarray:
        """(R, upto - lo): iterations lo..upto-1, truth where simulated, the model's own prediction elsewhere."""

    def complete(self) -> int:
        """Number of leading iterations every rank has completed."""

    def edges(self, upto: int) -> np.ndarray:
        """(upto,) bool, read-only: window edges before ``upto`` the model must not see (all False when kept)."""

    def latest_visible(self, k: int, before: int, same_stretch: bool = False) -> np.ndarray:
        """The latest ``k`` (at most) simulated, complete, non-edge iterations before ``before``, ascending;
        ``same_stretch``: only those of the latest contiguous simulated stretch among them."""


@dataclass
class OnlineSeries(SeriesView):
    """The :class:`~surrogate.base.SeriesView` a feed gives ``fit``/``tune`` (see the module docstring)."""

    job: str
    workload: str
    y: np.ndarray
    rank_port: np.ndarray | None = None
    mask: np.ndarray | None = None
    x: object | None = None
    shape: object | None = None
    info: object | None = None
    load: np.ndarray | None = None


class JobFeed:
    """One job's model inputs during a hybrid run. ``volumes``: (n_iterations,) relative volumes or None."""

    #: whether the backend must stream port samples for this feed
    wants_samples: ClassVar[bool] = False
    #: fit at the job's first prediction (True) or when the policy first answers PREDICT (False)
    fit_at_first_prediction: ClassVar[bool] = False
    #: whether the contexts of a predicted stretch are one context with ``iteration`` moved on (no truth arrives in a
    #: stretch, and nothing predicted is fed back): the controller may then predict the stretch in one
    #: ``Surrogate.predict_many`` call (its fast-forward)
    fixed_context: bool = False
    #: whether :meth:`on_record` does anything (the controller calls it only then: once per simulated rank-iteration)
    reads_records: ClassVar[bool] = False

    def __init__(self, model: Surrogate, job_id: int, lookback: int, volumes: np.ndarray | None = None):
        self.model = model
        self.job_id = job_id
        self.lookback = int(lookback)
        self.volumes = volumes

    def on_record(self, rank: int, iteration: int, start: float, end: float) -> None:
        """A simulated iteration record of this job (called only where :attr:`reads_records` says so)."""

    def _mixed(self, tl: Timeline, iteration: int, ranks: np.ndarray) -> np.ndarray:
        """The last ``lookback`` iterations before ``iteration``: truth, else the model's prediction; edges NaN."""
        lo = max(0, iteration - self.lookback)
        hist = tl.series(iteration, lo)[ranks]
        hist = np.where(tl.edges(iteration)[None, lo:iteration], np.nan, hist)
        if self.volumes is not None:
            hist = hist / self.volumes[None, lo:iteration]
        return hist

    def _pad(self, hist: np.ndarray) -> np.ndarray:
        if hist.shape[1] < self.lookback:
            hist = np.hstack([np.full((hist.shape[0], self.lookback - hist.shape[1]), np.nan), hist])
        return hist

    def context(self, tl: Timeline, iteration: int, ranks: np.ndarray) -> Context:
        """What the model predicts iteration ``iteration`` of ``ranks`` from."""
        raise NotImplementedError

    def history_key(self, tl: Timeline, iteration: int, ranks: np.ndarray) -> tuple | None:
        """A key equal for two calls of :meth:`context` exactly when their ``history`` is equal, or None (no cheap
        key: the default). The controller reuses a ``Surrogate.history_only`` model's answer under it."""
        return None

    def series(self, tl: Timeline) -> OnlineSeries:
        """The series ``fit``/``tune`` get."""
        raise NotImplementedError

    def targets(self, tl: Timeline, series: OnlineSeries, idx) -> list[int]:
        """The indices of ``idx`` the model may learn from."""
        return list(idx)

    def can_fit(self, series: OnlineSeries, idx: list[int]) -> bool:
        """Whether a fit on ``idx`` has anything to learn from (else the controller defers it)."""
        return self.model.can_fit(series, idx)

    def prepare_fit(self, tl: Timeline, series: OnlineSeries) -> None:
        """Called once, just before the model's first fit."""


class HistoryFeed(JobFeed):
    """Models that predict from iteration times only (see the module docstring). ``history``: one of
    :data:`HISTORY_MODES`."""

    def __init__(self, model: Surrogate, job_id: int, lookback: int, volumes: np.ndarray | None = None,
                 history: str = "truth"):
        super().__init__(model, job_id, lookback, volumes)
        if history not in HISTORY_MODES:
            raise ValueError(f"history must be 'mixed', 'truth' or 'window', got {history!r}")
        self.history = history
        self.fixed_context = history != "mixed"   # "mixed" feeds the model's own predictions back

    def context(self, tl: Timeline, iteration: int, ranks: np.ndarray) -> Context:
        if self.history == "mixed":
            hist = self._mixed(tl, iteration, ranks)
        else:
            # the latest simulated, complete, non-edge iterations; "window": only those of the latest simulated stretch
            cols = tl.latest_visible(self.lookback, iteration, same_stretch=self.history == "window")
            hist = tl.truth[np.asarray(ranks)[:, None], cols]   # np.ix_'s table, without its checks
            if self.volumes is not None:
                hist = hist / self.volumes[None, cols]
        if self.history == "mixed":
            cols = np.arange(max(0, iteration - self.lookback), iteration)
        return _described(Context(tl.job, tl.workload, self._pad(hist), iteration=iteration - 1), tl, cols,
                          self.lookback, iteration, ranks)

    def history_key(self, tl: Timeline, iteration: int, ranks: np.ndarray) -> tuple | None:
        """On truth: the history's columns and rows (the truth of a visible, complete iteration never changes)."""
        if self.history == "mixed":
            return None
        cols = tl.latest_visible(self.lookback, iteration, same_stretch=self.history == "window")
        return cols.tobytes(), np.asarray(ranks, dtype=np.int64).tobytes()

    def series(self, tl: Timeline) -> OnlineSeries:
        y = tl.truth.copy()
        y[:, tl.edges(tl.n_iterations)] = np.nan
        if self.volumes is not None:
            y = y / self.volumes[None, :y.shape[1]]
        return OnlineSeries(tl.job, tl.workload, y, info=tl.info, load=tl.load.copy())


class GraphFeed(JobFeed):
    """Graph models (see the module docstring): port graphs of job ``job_id`` from ``graphs``."""

    wants_samples = True
    fit_at_first_prediction = True
    reads_records = True

    def __init__(self, model: Surrogate, job_id: int, lookback: int, graphs: OnlineGraphs,
                 volumes: np.ndarray | None = None):
        super().__init__(model, job_id, lookback, volumes)
        self.graphs = graphs

    def on_record(self, rank: int, iteration: int, start: float, end: float) -> None:
        self.graphs.on_record(self.job_id, rank, iteration, start, end)

    def context(self, tl: Timeline, iteration: int, ranks: np.ndarray) -> Context:
        g = self.graphs
        ctx = _described(Context(tl.job, tl.workload, self._pad(self._mixed(tl, iteration, ranks)),
                                 iteration=iteration - 1), tl, np.arange(max(0, iteration - self.lookback), iteration),
                         self.lookback, iteration, ranks)
        ctx.graphs = g.context_graphs(self.job_id, iteration - 1, self.model.graph_lookback)
        ctx.rank_port = g.rank_port(self.job_id)[ranks]
        ctx.mask = g.mask(self.job_id)
        return ctx

    def series(self, tl: Timeline) -> OnlineSeries:
        T = tl.complete()
        y = tl.series(T)
        if self.volumes is not None:
            y = y / self.volumes[None, :T]
        g = self.graphs
        return OnlineSeries(tl.job, tl.workload, y, rank_port=g.rank_port(self.job_id), mask=g.mask(self.job_id),
                            x=g.view(self.job_id, T), shape=g.topo.shape)

    def targets(self, tl: Timeline, series: OnlineSeries, idx) -> list[int]:
        """Simulated (every rank has truth), non-edge iterations of ``idx`` inside the series; the dense series keeps
        an edge's time, as the contexts' back-fill does."""
        edges = tl.edges(series.T)
        return [int(i) for i in idx if 0 <= i < series.T and np.isfinite(tl.truth[:, i]).all() and not edges[i]]

    def can_fit(self, series: OnlineSeries, idx: list[int]) -> bool:
        # iteration t is learnt from t-1: a warm-up of one clean iteration has no target yet; and a warm-up that
        # ended before the first sampling window did has no graph to scale the features by
        return (any(i >= 1 for i in idx) and self.graphs.can_normalise(self.job_id, range(series.T))
                and self.model.can_fit(series, idx))

    def prepare_fit(self, tl: Timeline, series: OnlineSeries) -> None:
        self.graphs.fit_normaliser(self.job_id, range(series.T))  # every simulated warm-up graph, edges too


def _described(ctx: Context, tl: Timeline, cols: np.ndarray, lookback: int, iteration: int,
               ranks: np.ndarray) -> Context:
    """``ctx`` with the job-local rank of each history row, the iteration index of each history column (left-padded
    with -1 like the history), the job's :class:`~surrogate.base.JobInfo` and the co-runner load at each column's
    start and at ``iteration``'s, and (when the run records it) the flow model's iteration time at the same points."""
    ctx.ranks = np.asarray(ranks, dtype=np.int64)
    cols = np.asarray(cols, dtype=np.int64)[-lookback:]
    pad = lookback - len(cols)
    # once per prediction: without padding (the usual case) the columns are taken as they are, no concatenation
    ctx.columns = np.concatenate([np.full(pad, -1, np.int64), cols]) if pad else cols.copy()
    ctx.info = tl.info
    ctx.load = np.concatenate([np.full(pad, np.nan), tl.load[cols]]) if pad else tl.load[cols]
    ctx.load_now = float(tl.load[iteration]) if iteration < len(tl.load) else None
    if tl.flow is not None and np.isfinite(tl.flow).any():
        ctx.flow = np.concatenate([np.full(pad, np.nan), tl.flow[cols]]) if pad else tl.flow[cols]
        ctx.flow_now = float(tl.flow[iteration]) if iteration < len(tl.flow) else None
    return ctx


def feed_class(model: Surrogate) -> type[JobFeed]:
    """The kind of feed ``model`` reads: :class:`GraphFeed` for models that need port graphs, else
    :class:`HistoryFeed` (its ``wants_samples`` says whether the backend must stream port samples)."""
    return GraphFeed if model.needs_graphs else HistoryFeed


def feed_for(model: Surrogate, job_id: int, lookback: int, *, volumes: np.ndarray | None = None,
             history: str = "truth", graphs: OnlineGraphs | None = None) -> JobFeed:
    """The feed of ``model`` for job ``job_id``: a :class:`GraphFeed` for models that need graphs (``graphs``
    required), else a :class:`HistoryFeed`."""
    if feed_class(model) is GraphFeed:
        if graphs is None:
            raise SurrogateError(f"{model.name!r} needs port graphs: pass graphs=OnlineGraphs(...) "
                                 "(see hybridsim.runner.build_controller)")
        return GraphFeed(model, job_id, lookback, graphs, volumes)
    return HistoryFeed(model, job_id, lookback, volumes, history)


class Feeds:
    """Makes each job's feed in a hybrid run and owns what the feeds share: the port graphs the graph models read
    (:class:`~surrogate.online_graphs.OnlineGraphs`, fed by the backend's port samples). The controller asks for a
    feed when a job starts and passes the port samples on; which models need graphs is this module's business.

    Args:
        models: every model of the run (whether any needs port graphs decides :attr:`wants_samples` before the run).
        shape: the topology's :class:`~hybridsim_common.topology.DragonflyShape` (None: no port graphs can be built).
        placement: job id -> terminal id of each rank, for jobs placed before the run (a stream job's terminals
            come with its start).
    """

    def __init__(self, models=(), shape=None, placement=None):
        self.wants_samples = any(feed_class(m).wants_samples for m in models)
        self.placement = placement
        self.graphs: OnlineGraphs | None = None
        if self.wants_samples and shape is not None:
            from hybridsim_common.topology import Dragonfly

            self.graphs = OnlineGraphs(Dragonfly(shape), {})

    def feed(self, model: Surrogate, job_id: int, name: str, n_iterations: int, lookback: int, *,
             volumes: np.ndarray | None = None, history: str = "truth", terminals=None) -> JobFeed:
        """The feed of job ``job_id`` (its port graphs set up on ``terminals``, default its placement, when the
        model needs them)."""
        if feed_class(model) is GraphFeed and self.graphs is not None:
            if terminals is None and self.placement is not None:
                terminals = self.placement[job_id]
            if terminals is None:
                raise SurrogateError(f"job {name!r}: {model.name!r} needs port graphs, and the job's terminals are "
                                     "unknown (pass the run's placement)")
            self.graphs.add_job(job_id, name, terminals, n_iterations)
        return feed_for(model, job_id, lookback, volumes=volumes, history=history, graphs=self.graphs)

    def on_samples(self, block) -> None:
        """A block of port samples from the backend."""
        if self.graphs is not None:
            self.graphs.on_samples(block)
