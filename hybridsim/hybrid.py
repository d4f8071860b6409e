"""The hybrid controller: the :class:`~hybridsim_common.backend.Director` that joins a policy and a surrogate.

Per job it keeps the (ranks x iterations) tables of truth (simulated iteration times), predictions and modes. At each
iteration boundary it builds a :class:`~controllers.base.JobView`, asks the policy for the mode, and validates the
answer. For predicted iterations it builds each rank's look-back (truth where simulated, the earlier prediction where
not) and asks the surrogate for the next iteration time of every rank in one batch.

Ground truth and the surrogate meet in three places:

* end of the warm-up: ``surrogate.fit`` on every truth so far, when the policy first answers PREDICT or, if the
  job's feed says so (``fit_at_first_prediction``), at the job's first prediction;
* inside a truth window (a SIMULATE iteration after predicted ones): once every rank of the job has finished it, the
  surrogate predicts it from the history *before* it (a shadow prediction), and the error is recorded -- this is what
  error-driven policies see;
* end of a truth window: ``surrogate.tune`` on the window (``surrogate.tune`` is told the iteration indices).

A predicted iteration advances the job by its iteration time, :func:`job_time` (the mean of the per-rank
predictions, the statistic a bulk-synchronous job's completion follows). With ``sync="skew"`` (the default) every rank
advances by it from its own start, so the skew between ranks that the last simulated iteration left is carried
through the predicted stretch; with ``sync="job"`` the ranks end together (the latest start plus the job time), which
erases the skew: the next truth window then starts in a lockstep the pure run never has, and a job whose ranks wait on
late neighbours (nearest-neighbour exchanges) runs it 6-12 % fast. Per-rank ends (``sync="rank"``) let the skew grow
without bound (it feeds back through the waits measured in truth windows).

With ``volumes`` (bytes each iteration sends, known from the workload definition), the surrogate works on
volume-normalised times: history and training targets are divided by the iteration's relative volume and
predictions multiplied by the target iteration's, so known irregular iterations (LAMMPS' neighbour-exchange steps)
are not surprises. Jobs whose volume never changes are left as they are.

What each model sees (its contexts, its fit/tune series and targets, whether a fit is possible yet) comes from a
per-job feed chosen once from the model (:func:`surrogate.online.feed_for`: history models and graph models, whose
port graphs are built online from the port samples the controller asks the backend for: ``wants_samples``,
``on_samples``). When a fit has nothing to learn from yet (a graph model after a warm-up of one iteration), it is
deferred: predictions fall back to each rank's last simulated time (counted as fallbacks) and the fit is retried at
the end of every truth window.

At every decision the controller records the job's co-runners as the model may see them (``Context.load`` /
``load_now``: their ranks over the machine's terminals; and, when a model declares ``needs_flow``, ``Context.flow`` /
``flow_now``: the job's iteration time under the flow-level model, :mod:`hybridsim.flow`, beside those co-runners),
so a co-runner's start or end reaches the model before any truth of it does.

A prediction that is not finite, not positive or more than ``MAX_RATIO`` (100x) away from the rank's last
simulated iteration time, or refused by the model (a ``SurrogateError`` from ``predict``: counted again in
``refused_predictions``, the latest message in the summary), is replaced by that time and counted
(``summary()["counts"]["fallback_predictions"]``): a
model fitted on a warm-up of one or two iterations can extrapolate into a collapse, and an iteration time of 0 would
stop the run.

Wall time is split into simulation (the backend's time between director calls), controller (the director's calls
themselves, less the surrogate's share: views, policy, bookkeeping), inference and tuning; building graphs for a
context counts as inference, for a fit/tune series as tuning. Policies see all four in ``JobView.costs``.

Fast-forward: when the policy promises, at a PREDICT decision, that the job's next iterations are PREDICT too
(``Policy.horizon``), the controller hands the backend the whole stretch after that iteration's prediction
(:meth:`HybridController.fast_forward`: one ``Surrogate.predict_many`` call, every rank's start and duration as the
per-iteration calls would compute them) and applies what the skipped ``mode_for`` and ``predict`` calls would have
done as the backend reports the stretch reached (:meth:`HybridController.fast_forwarded`); the results are the
per-iteration path's (hybridsim/engine/README.md, "Fast-forward").

Per decision and per prediction the controller's work does not grow with the iterations a job has run: the job's
timeline (:class:`hybridsim.timeline.JobState`) keeps its counts, edge marks, visible truth and each rank's latest
truth up to date as records arrive, and a policy's view reads the per-iteration tables lazily.
"""

from __future__ import annotations

import bisect
import math
import time

import numpy as np

from controllers.base import JobView, Policy, PolicyError
from surrogate.base import Context, JobInfo, Surrogate, SurrogateError
from surrogate.online import Feeds, JobFeed, OnlineSeries
from surrogate.volumes import relative_volumes

from hybridsim_common.backend import Director, Mode
from hybridsim_common.records import IterationRecord
from .timeline import JobState, Lazy


class HybridError(RuntimeError):
    pass


def job_time(per_rank: np.ndarray) -> float:
    """The iteration time of a job from its ranks' times (what ``sync: job`` and ``skew`` advance it by): the
    statistic its completion follows, the mean over ranks (a bulk-synchronous job's iterations take as long as its
    ranks do together; with right-skewed per-rank times the median would advance it too fast)."""
    per_rank = np.asarray(per_rank, dtype=np.float64)
    return float(np.add.reduce(per_rank, axis=None)) / per_rank.size  # np.mean's sum and division, without its checks


#: a per-rank prediction more than this factor away from the rank's last simulated iteration time (or not finite,
#: or <= 0) is a model failure: that time is used instead and ``counts["fallback_predictions"]`` counts it
MAX_RATIO = 100.0

#: clean warm-up iterations a job's model is scored on at its first fit (:meth:`HybridController._backtest`)
BACKTEST = 8

#: an edge correction never shortens a predicted iteration below this fraction of the prediction
EDGE_FLOOR = 0.1
SYNCS = ("job", "skew", "rank")   # how a predicted iteration ends on the ranks of a job (scenario controller.sync)


def _job_span(jt: float, corr: float) -> float:
    """A ``sync: job`` iteration's length from the latest start: the job time ``jt`` shifted by the edge correction
    ``corr``, never below :data:`EDGE_FLOOR` of it."""
    return max(jt + corr, EDGE_FLOOR * jt)


def _skew_run(starts: np.ndarray, jts, until: float) -> tuple[int, np.ndarray, np.ndarray]:
    """The iterations of a ``sync: skew`` stretch, from ranks starting at ``starts`` with job times ``jts``, over which
    every rank simply advances by the job's span (no rank held back to the latest start), each is decided before
    ``until`` and virtual time runs forward: ``(q, rows, spans)``, ``rows[m]`` the ranks' starts of iteration m (q + 1
    rows at least). The starts are running sums, ``np.add.accumulate``'s sequential float64 additions: the values
    ``_durations`` gives one iteration at a time (for performance)."""
    jt = np.asarray(jts, dtype=np.float64)
    span = np.maximum(jt + 0.0, EDGE_FLOOR * jt)   # _job_span of each, element by element
    rows = np.empty((len(span) + 1, len(starts)))
    rows[0] = starts
    rows[1:] = span[:, None]
    rows = np.add.accumulate(rows, axis=0)
    cur, nxt = rows[:-1], rows[1:]
    hi = cur.max(axis=1)
    ok = (((hi[:, None] - cur) <= span[:, None]).all(axis=1) & (cur.min(axis=1) < until)
          & (nxt.min(axis=1) >= hi))
    return (len(ok) if ok.all() else int(np.argmin(ok))), rows, span


class _Stretch:
    """A fast-forward stretch granted to one job (:meth:`HybridController.fast_forward`): from iteration ``first``,
    per iteration its decision time, the model's per-rank times ``raw`` (k, R) and the ranks that fell back (``bad``
    counts), the ranks' ``starts`` and ``durations``; the co-runner ``load`` (and ``corunners`` and their ``flow``
    time) every decision of it records; the promise's ``until``; how many decisions and predictions are applied."""

    def __init__(self, first: int, load: float, corunners: tuple, flow, until: float, raw: np.ndarray,
                 bad: np.ndarray):
        self.first, self.load, self.corunners, self.flow, self.until = first, load, corunners, flow, until
        self.raw, self.bad = raw, bad
        self.times: list[float] = []
        self.starts = self.durations = np.zeros((0, 0))   # (k, R) each, set with the times
        self.decided = self.predicted = 0

    def truncate(self, h: int) -> None:
        del self.times[h:]
        self.starts, self.durations = self.starts[:h], self.durations[:h]


class HybridController(Director):
    """Director for a hybrid run. ``jobs`` = list of (name, workload kind, n_ranks, n_iterations or None);
    ``surrogate`` = one model per job id (dict) or a single model instance deep-copied per job (a model is fitted
    and tuned on its own job's truth only).

    ``stream``: the jobs start and end when a scheduler says (the backend calls :meth:`on_job_start` and
    :meth:`on_job_end`): a job's state and feed are created when it starts, it is simulated until its policy has
    history to predict from, and policies see the running jobs in ``JobView.running``."""

    def __init__(self, jobs, policy: Policy, surrogate: Surrogate | dict[int, Surrogate], *, keep_background: bool | str = True,
                 lookback: int | None = None, tune: bool = True, policy_name: str | None = None,
                 sync: str = "skew", volumes: dict[int, np.ndarray] | None = None, shape=None, placement=None,
                 drop_edges: bool = True, history: str = "truth", correct_edges: bool = True, stream: bool = False,
                 infos: dict[int, JobInfo] | None = None, flow=None, truth_reason: str | None = None):
        self.policy = policy
        #: why the default controller runs the truth instead (hybridsim.estimate: a hybrid run cannot pay), or None
        self.truth_reason = truth_reason
        self.policy_name = policy_name or (policy.name if isinstance(policy, Policy) else type(policy).__name__)  # duck-typed plug-ins
        if isinstance(surrogate, dict):
            self.models = dict(surrogate)
        else:
            import copy

            self.models = {jid: copy.deepcopy(surrogate) for jid, (_n, _k, _r, n_it) in enumerate(jobs)
                           if n_it is not None}
        self.surrogate = next(iter(self.models.values()), None) if not isinstance(surrogate, Surrogate) \
            else surrogate
        self.keep_background = keep_background
        self.lookback = int(lookback or max([m.lookback for m in self.models.values()] + [1]))
        self.do_tune = tune
        if sync not in SYNCS:
            raise ValueError(f"sync must be one of {', '.join(SYNCS)}, got {sync!r}")
        self.sync = sync
        # workload volume normalisation: job id -> (iterations,) relative bytes sent per iteration (mean 1)
        self.volumes = {jid: r for jid, v in (volumes or {}).items() if (r := relative_volumes(v)) is not None}
        self.jobs = list(jobs)
        self.stream = bool(stream)
        #: job id -> JobInfo (a stream job's groups are set from its terminals when it starts)
        self.infos = dict(infos or {})
        #: the flow-level interference model (:class:`hybridsim.flow.FlowModel`, jobs placed before the run placed
        #: already, a stream job placed when it starts), built only when a model reads it (``Surrogate.needs_flow``)
        self.flow = flow
        #: job id -> iteration -> the co-runners it was decided beside (what ``JobState.flow`` was computed from)
        self._sets: dict[int, dict[int, tuple]] = {}
        self.states: dict[int, JobState | None] = {}
        for jid, (name, kind, n_ranks, n_it) in enumerate(jobs):
            # a stream job's state is created when it starts (on_job_start)
            self.states[jid] = None if n_it is None or self.stream else JobState.new(name, jid, kind, n_ranks, n_it)
            if self.states[jid] is not None:
                self.states[jid].info = self.infos.get(jid)
        self.started: dict[int, float] = {} if self.stream else {jid: 0.0 for jid in range(len(self.jobs))}
        self.running: dict[int, None] = {} if self.stream else dict.fromkeys(range(len(self.jobs)))
        if history not in ("mixed", "truth", "window"):
            raise ValueError(f"history must be 'mixed', 'truth' or 'window', got {history!r}")
        self.history = history
        #: makes each job's feed and owns what they share (the port graphs of graph models: ``shape`` the topology,
        #: ``placement`` job id -> terminal of each rank for jobs placed before the run)
        self.inputs = Feeds(self.models.values(), shape, placement)
        #: what each job's model sees (surrogate.online), chosen once from the model
        self.feeds: dict[int, JobFeed] = {} if self.stream else {jid: self._feed(jid) for jid in self.models}
        self.wall = {"inference": 0.0, "tuning": 0.0}
        self._director_s = 0.0  # wall seconds inside director calls (inference and tuning included)
        self._t0: float | None = None  # wall clock at the first director call (start of the backend's run)
        self.now = 0.0  # virtual time: the latest iteration end seen (records arrive in time order)
        self.drop_edges = drop_edges
        self.correct_edges = correct_edges
        self.pred_spans: dict[int, list[tuple[float, float]]] = {jid: [] for jid in self.states}
        self.max_span: dict[int, float] = {jid: 0.0 for jid in self.states}
        self.pending: dict[int, float] = {}  # job -> when its first rank stopped for an iteration not yet predicted
        self.last_refusal: str | None = None  # the latest SurrogateError a model raised at a prediction (summary)
        self.counts = {"inference_calls": 0, "tune_calls": 0, "fit_calls": 0, "deferred_fits": 0,
                       "fallback_predictions": 0, "edge_corrections": 0, "refused_predictions": 0}
        #: fast-forward: job -> (iteration, n, until), the policy's horizon after its latest PREDICT (dropped by any
        #: other decision); job -> the stretch granted on it (:class:`_Stretch`) until all of it is applied
        self._horizon: dict[int, tuple[int, int, float]] = {}
        self._stretches: dict[int, _Stretch] = {}

    def _feed(self, jid: int, terminals=None) -> JobFeed:
        name, _kind, _r, n_it = self.jobs[jid]
        return self.inputs.feed(self.models[jid], jid, name, n_it, self.lookback, volumes=self.volumes.get(jid),
                                history=self.history, terminals=terminals)

    @property
    def graphs(self):
        """The online port graphs the graph models' feeds share (:class:`surrogate.online_graphs.OnlineGraphs`), or
        None."""
        return self.inputs.graphs

    # ------------------------------------------------------------------------------------------------ job stream
    def on_job_start(self, job_id: int, t: float, terminals) -> None:
        """A stream job starts: its state and feed (with its port graphs, for graph models) are created now."""
        t0 = time.perf_counter()
        try:
            self._on_job_start(job_id, t, terminals)
        finally:
            self._director_s += time.perf_counter() - t0

    def _on_job_start(self, job_id: int, t: float, terminals) -> None:
        self._horizon.clear()
        self.started[job_id] = t
        self.running[job_id] = None
        if self.flow is not None:
            self.flow.place(job_id, terminals)
        name, kind, n_ranks, n_it = self.jobs[job_id]
        if n_it is None or job_id not in self.models:
            return
        st = self.states[job_id] = JobState.new(name, job_id, kind, n_ranks, n_it)
        st.drop_edges = self._drop_edges
        if job_id in self.infos:
            st.info = self.infos[job_id] = self.infos[job_id].placed(terminals)
        self.feeds[job_id] = self._feed(job_id, terminals)

    def on_job_end(self, job_id: int, t: float) -> None:
        self._horizon.clear()
        self._stretches.pop(job_id, None)   # (killed at its walltime inside a stretch: the rest never comes)
        self.running.pop(job_id, None)

    @property
    def drop_edges(self) -> bool:
        """Whether window edges are left out of what the models see (see :meth:`JobState.window_edges`)."""
        return self._drop_edges

    @drop_edges.setter
    def drop_edges(self, value: bool) -> None:
        self._drop_edges = bool(value)
        for st in self.states.values():
            if st is not None:
                st.drop_edges = self._drop_edges

    @property
    def wants_samples(self) -> bool:
        """Whether the backend should stream port samples to :meth:`on_samples` (graph surrogates; in a stream, whose
        feeds are made as jobs start: whether there are port graphs to feed)."""
        return self.inputs.wants_samples

    def on_samples(self, block) -> None:
        t0 = time.perf_counter()
        self.inputs.on_samples(block)
        self._director_s += time.perf_counter() - t0

    # ------------------------------------------------------------------------------------------------ views
    def _clock(self) -> float:
        t = time.perf_counter()
        if self._t0 is None:
            self._t0 = t
        return t

    def simulate_wall(self) -> float:
        """Wall seconds spent outside the director's calls since the first one: the backend's time."""
        if self._t0 is None:
            return 0.0
        return max(0.0, self._clock() - self._t0 - self._director_s)

    def wall_split(self) -> dict[str, float]:
        """Wall seconds inside the director's calls: ``inference`` and ``tuning`` (the surrogate's), ``controller``
        (the rest: views, policy, bookkeeping, graph building outside contexts and series)."""
        return {**self.wall, "controller": max(0.0, self._director_s - self.wall["inference"] - self.wall["tuning"])}

    def view(self, st: JobState, iteration: int) -> JobView:
        """The policy's view of job ``st`` before ``iteration``. Built in O(1): per-iteration fields are lazy
        sequences over the job's tables (see :class:`hybridsim.timeline.Lazy`), counts are kept as modes are
        decided."""
        n = min(iteration, len(st.modes))
        modes, errors = st.modes, st.errors
        return JobView(
            job=st.job, job_id=st.job_id, iteration=iteration, n_iterations=st.n_iterations,
            mode=modes[n - 1] if n else None, modes=Lazy(modes.__getitem__, n),
            truth=st.truth_means(n), predicted=st.predicted_means(n),
            errors=Lazy(errors.__getitem__, len(errors)), signed_errors=Lazy(st.signed.__getitem__, len(st.signed)),
            clean_signed_errors=Lazy(st.clean_signed.__getitem__, len(st.clean_signed)) if self.drop_edges else None,
            costs={**self.wall_split(), "simulated_iterations": st.n_simulated,
                   "predicted_iterations": st.n_predicted, "simulate": self.simulate_wall()},
            now=self.now, start=self.started.get(st.job_id, 0.0), running=tuple(self.running),
        )

    # ------------------------------------------------------------------------------------------------ director
    def mode_for(self, job_id: int, iteration: int) -> Mode:
        t0 = self._clock()
        try:
            return self._mode_for(job_id, iteration)
        finally:
            self._director_s += time.perf_counter() - t0

    def _mode_for(self, job_id: int, iteration: int) -> Mode:
        st = self.states.get(job_id)
        if st is None or iteration >= st.n_iterations:
            return Mode.SIMULATE
        if iteration < len(st.modes):
            return st.modes[iteration]
        view = self.view(st, iteration)
        try:
            raw = self.policy.decide(view)
        except Exception as exc:
            raise PolicyError(f"policy {self.policy_name!r} raised at job {st.job!r} iteration {iteration}: "
                              f"{type(exc).__name__}: {exc}") from exc
        try:
            mode = raw if type(raw) is Mode else Mode(raw.value if isinstance(raw, Mode) else raw)
        except (ValueError, AttributeError):
            raise PolicyError(f"policy {self.policy_name!r} returned {raw!r} for job {st.job!r} iteration "
                              f"{iteration}; expected 'simulate' or 'predict'") from None
        corunners = self._corunners(job_id, mode)
        st.load[iteration] = self._corunner_load(job_id, mode, corunners)
        if self.flow is not None:
            self._sets.setdefault(job_id, {})[iteration] = tuple(corunners)
            st.flow[iteration] = self.flow.iteration_time(job_id, corunners)
        if mode == Mode.PREDICT and iteration == 0:
            raise PolicyError(f"policy {self.policy_name!r} asked to predict job {st.job!r} iteration 0: there is "
                              "no history to predict from; simulate at least one iteration first")
        if (mode == Mode.PREDICT and not st.fitted and not st.fit_deferred
                and not self.feeds[job_id].fit_at_first_prediction):
            self._fit(st, iteration)
        if mode == Mode.SIMULATE and st.modes and st.modes[-1] == Mode.PREDICT:
            st.window_start = iteration
        if mode == Mode.PREDICT:
            self.pending[job_id] = self.now   # its first rank stops injecting now (the others as they get here)
        st.decide(mode)
        # what the policy promised before this decision may hold for less after it (Policy.standing); this job's
        # own promise, asked now, is granted as a stretch at its prediction (fast_forward)
        if self._horizon:
            stand = self.policy.standing
            self._horizon = {k: (i, n, stand(k, u)) for k, (i, n, u) in self._horizon.items() if k != job_id}
        if mode == Mode.PREDICT and self.feeds[job_id].fixed_context and isinstance(self.policy, Policy):
            n, until = self.policy.horizon(view)   # (a duck-typed policy promises nothing)
            if n > 0:
                self._horizon[job_id] = (iteration, int(n), float(until))
        return mode

    def _corunners(self, job_id: int, mode: Mode) -> list[int]:
        """The jobs running beside ``job_id`` now: started (a stream job), not yet through its last iteration
        (background jobs run throughout). For an iteration to be simulated, the traffic it will meet: without
        ``keep_background`` a co-runner that is being predicted injects nothing and is not counted. For one to be
        predicted, what the pure simulation would have: every co-runner. Their ranks give the co-runner load
        (:meth:`JobInfo.load`), the set the flow model's iteration time."""
        out = []
        for k in self.running:  # a stream's running jobs only: this runs once per job and iteration
            if k == job_id:
                continue
            st = self.states.get(k)
            if st is not None and st.done_count[-1] == st.n_ranks:
                continue  # through its last iteration
            if (mode == Mode.SIMULATE and not self.keep_background and st is not None and st.modes
                    and st.modes[-1] == Mode.PREDICT):
                continue  # silent beside this truth iteration
            out.append(k)
        return out

    def _corunner_load(self, job_id: int, mode: Mode, corunners=None) -> float:
        """:meth:`JobInfo.load` of :meth:`_corunners` (given or found); NaN without the job's info."""
        info = self.infos.get(job_id)
        if info is None:
            return math.nan
        if corunners is None:
            corunners = self._corunners(job_id, mode)
        return info.load(sum(self.jobs[k][2] for k in corunners))

    def _context(self, st: JobState, iteration: int, ranks: np.ndarray) -> Context:
        return self.feeds[st.job_id].context(st, iteration, ranks)

    def _predict(self, st: JobState, iteration: int, ranks: np.ndarray) -> np.ndarray:
        model = self.models[st.job_id]
        if st.fitted:
            t0 = time.perf_counter()
            ctx = self._context(st, iteration, ranks)
            try:
                y = np.asarray(model.predict(ctx), dtype=np.float64).reshape(-1)
            except SurrogateError as exc:
                # a model that cannot answer from this context (e.g. a graph model whose look-back of some rank is
                # all window edges) fails like a non-finite answer: every rank falls back below, and it is counted
                y = np.full(len(ranks), np.nan)
                self.counts["refused_predictions"] += 1
                self.last_refusal = f"job {st.job!r} iteration {iteration}: {exc}"
            self.wall["inference"] += time.perf_counter() - t0
            self.counts["inference_calls"] += 1
        else:  # fit deferred (see _fit): every rank falls back below
            y = np.full(len(ranks), np.nan)
        y, bad = self._checked(st, iteration, y, self._last_truth(st, iteration, ranks))
        n_bad = int(bad.sum())
        if n_bad:
            self.counts["fallback_predictions"] += n_bad
            st.fallbacks += n_bad
        return y

    def _checked(self, st: JobState, iteration, y: np.ndarray, last: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """A model's per-rank times ``y`` for ``iteration`` as the job's predictions: failed ranks replaced by their
        last truth ``last`` (flagged in the returned mask), times the iteration's volume. ``y`` is changed in place.
        Also row by row for a stretch: ``y`` (k, R), ``iteration`` a slice of k iterations, ``last`` (1, R)."""
        if y.shape[-1] != last.shape[-1]:
            raise HybridError(f"surrogate {self.models[st.job_id].name!r} returned {y.shape[-1]} predictions for "
                              f"{last.shape[-1]} ranks of job {st.job!r}")
        # a model may fail on a rank (NaN, <= 0, or more than MAX_RATIO away from the rank's last simulated time,
        # which no real job's iterations come near): fall back to that rank's last simulated time (a chain of
        # predictions may have drifted, so the reference is truth)
        with np.errstate(invalid="ignore", divide="ignore"):
            bad = ~np.isfinite(y) | (y <= 0) | (y > last * MAX_RATIO) | (y < last / MAX_RATIO)
        if bad.any():  # (when nothing is bad, y is finite and positive already)
            np.copyto(y, np.broadcast_to(last, y.shape), where=bad)
            if (~np.isfinite(y) | (y <= 0)).any():
                raise HybridError(f"surrogate {self.models[st.job_id].name!r} gave no usable prediction for job "
                                  f"{st.job!r} iteration {iteration}")
        v = self.volumes.get(st.job_id)
        if v is None:
            return y, bad
        return (y * v[iteration] if y.ndim == 1 else y * v[iteration][:, None]), bad

    def _last_truth(self, st: JobState, iteration: int, ranks: np.ndarray) -> np.ndarray:
        """Each rank's last simulated iteration time before ``iteration`` (volume-normalised like the history; NaN
        for a rank with none)."""
        col = st.last_truth_col(iteration, ranks)
        c = np.maximum(col, 0)
        out = np.where(col >= 0, st.truth[ranks, c], np.nan)
        v = self.volumes.get(st.job_id)
        return out if v is None else out / v[c]

    def predict(self, job_id: int, iteration: int, ranks: np.ndarray, starts: np.ndarray) -> np.ndarray:
        t0 = time.perf_counter()
        try:
            return self._predict_job(job_id, iteration, ranks, starts)
        finally:
            self._director_s += time.perf_counter() - t0

    def _predict_job(self, job_id: int, iteration: int, ranks: np.ndarray, starts: np.ndarray) -> np.ndarray:
        st = self.states[job_id]
        ranks = np.asarray(ranks, dtype=np.int64)
        starts = np.asarray(starts, dtype=np.float64)
        if not st.fitted and not st.fit_deferred:
            # graph models are fitted here, at the first prediction: every rank of the job is parked, so every
            # warm-up iteration is complete (when the policy decides, other ranks may still be in the last one)
            self._fit(st, iteration)
        y = self._predict(st, iteration, ranks)
        st.raw[ranks, iteration] = y
        d = self._durations(y, starts, self._edge_correction(st, iteration))
        self._predicted(st, iteration, ranks, starts, d)
        return d

    def _durations(self, y: np.ndarray, starts: np.ndarray, corr: float, jt: float | None = None) -> np.ndarray:
        """The ranks' durations of a predicted iteration from the job's per-rank predictions ``y``, ranks starting
        at ``starts``, shifted by the edge correction ``corr`` (``jt``: ``job_time(y)`` when known already)."""
        if self.sync == "job":
            # Ranks of a coupled job finish an iteration together; ending each at its own start + prediction lets
            # the skew between ranks grow with every predicted iteration and feed back through the waits measured
            # in the next truth window. So the job's ranks end together: latest start + the job's iteration time,
            # the statistic its completion follows (job_time: the mean over ranks).
            jt = job_time(y) if jt is None else jt
            return (starts.max() + _job_span(jt, corr)) - starts
        if self.sync == "skew":
            # Every rank advances by the job's iteration time from its own start: the skew between ranks that the
            # last simulated iteration left is carried through the predicted stretch unchanged (neither erased, as
            # "job" does, nor grown, as per-rank predictions do), so the next truth window starts from it. No rank
            # of a coupled job ends an iteration before every rank has started it (nor, in the engine, before the
            # moment it is predicted: the job's latest start), which bounds the skew by one iteration time.
            jt = job_time(y) if jt is None else jt
            return np.maximum(_job_span(jt, corr), starts.max() - starts)
        if corr:
            return np.maximum(y + corr, EDGE_FLOOR * y)
        return y

    def _predicted(self, st: JobState, iteration: int, ranks, starts: np.ndarray, d: np.ndarray) -> None:
        """Iteration ``iteration`` of ``ranks`` is predicted to last ``d`` from ``starts``: the job's tables, its
        predicted span, and it no longer pending."""
        st.pred[ranks, iteration] = d
        span = (float(starts.min()), float((starts + d).max()))
        self.pending.pop(st.job_id, None)
        self.pred_spans[st.job_id].append(span)
        self.max_span[st.job_id] = max(self.max_span[st.job_id], span[1] - span[0])

    # ------------------------------------------------------------------------------------------------ fast-forward
    def fast_forward(self, job_id: int, iteration: int, ends: np.ndarray) -> np.ndarray | None:
        """The stretch after predicted ``iteration`` (:meth:`Director.fast_forward`): the iterations the policy's
        :meth:`~controllers.base.Policy.horizon` promised PREDICT when it decided ``iteration`` (no decision since),
        before the job's last, whose decision times (the first rank's end of the one before, as the engine asks)
        come before the promise's ``until``, predicted in one :meth:`~surrogate.base.Surrogate.predict_many` call.
        Only for feeds whose context does not move over a predicted stretch (``JobFeed.fixed_context``). What the
        per-iteration calls would record is applied as the backend reports the stretch reached
        (:meth:`fast_forwarded`)."""
        t0 = self._clock()
        try:
            return self._fast_forward(job_id, iteration, np.asarray(ends, dtype=np.float64))
        finally:
            self._director_s += time.perf_counter() - t0

    def _fast_forward(self, job_id: int, iteration: int, ends: np.ndarray) -> np.ndarray | None:
        h = self._horizon.pop(job_id, None)
        st = self.states.get(job_id)
        if h is None or h[0] != iteration or st is None or not st.fitted:
            return None
        _, n, until = h
        if self.flow is not None and any(k not in self.flow.period for k in self.running
                                         if self.states.get(k) is not None):
            return None   # a job's first truth will set its flow period, and every job's flow values move with it
        n = min(n, st.n_iterations - 2 - iteration)  # the last iteration is decided on its own (others read its end)
        # Each skipped decision's JobView.now must be the time its first rank gets there: true while virtual time
        # runs forward (the latest record end seen is then the current time). It runs back where an iteration ends
        # on some rank before its last rank started it (per-rank ends, "skew" or "rank", with a skew larger than the
        # iteration): not at all in a stretch (it stops before such an iteration), not in the others' (the backend
        # ends every stretch then), and not before this one (now, the latest end seen, is not past its start).
        if n <= 0 or not ends.min() < until or not self.now <= ends.min():
            return None
        if math.isfinite(until):
            # as many as fit before ``until`` at the pace of the iteration just predicted, and some: a stretch that
            # ends before ``until`` is as right as a longer one (the next iteration is then asked for on its own)
            pace = float(np.mean(st.pred[:, iteration]))
            if pace > 0:
                n = min(n, int((until - float(ends.min())) / pace * 1.25) + 4)
        first = iteration + 1
        ranks = np.arange(st.n_ranks)
        # the decisions' co-runners: the same at every boundary of a stretch (no job starts, ends or completes its
        # iterations in one: the backend ends it then)
        corunners = self._corunners(job_id, Mode.PREDICT)
        load = self._corunner_load(job_id, Mode.PREDICT, corunners)
        flow = self.flow.iteration_time(job_id, corunners) if self.flow is not None else None
        keep = st.load[first], st.flow[first]
        st.load[first] = load   # the context reads the decision's co-runner load (and flow), as after mode_for
        if flow is not None:
            st.flow[first] = flow
        try:
            ctx = self._context(st, first, ranks)
        finally:
            st.load[first], st.flow[first] = keep
        model = self.models[job_id]
        t0 = time.perf_counter()
        ys = np.array(model.predict_many(ctx, n), dtype=np.float64)   # a copy: the fallback writes into it
        self.wall["inference"] += time.perf_counter() - t0
        if ys.shape != (n, st.n_ranks):
            raise HybridError(f"surrogate {model.name!r}: predict_many gave shape {ys.shape} for {n} iterations of "
                              f"{st.n_ranks} ranks of job {st.job!r}")
        # _checked for every row at once (elementwise, so the same values)
        ys, bad = self._checked(st, slice(first, first + n), ys, self._last_truth(st, first, ranks)[None, :])
        plan = _Stretch(first, load, tuple(corunners), flow, until, ys, bad.sum(axis=1))
        # job_time of every row at once (a row's sum is the 1-D sum of it: the same value)
        jts = (np.add.reduce(ys, axis=1) / ys.shape[1]).tolist()
        times, blocks = plan.times, []   # blocks: (starts, durations) of consecutive iterations, (k, R) or (k, 1)
        starts = ends
        m = 0
        while m < n:   # each iteration's durations, the ranks starting where they ended the one before
            t = float(starts.min())   # its decision: when the first rank gets there
            if not t < until:
                break
            if self.sync == "job" and t == float(starts.max()):
                # from here every rank starts together, and _durations' float64 operations are the same for each:
                # done once per iteration on Python floats (the same IEEE arithmetic; for performance)
                c, cs, ds = t, [], []
                while m < n and c < until:
                    d = (c + _job_span(jts[m], 0.0)) - c
                    cs.append(c)
                    ds.append(d)
                    c = c + d
                    m += 1
                times += cs
                blocks.append((np.array(cs)[:, None], np.array(ds)[:, None]))
                break
            if self.sync == "skew":
                q, rows, span = _skew_run(starts, jts[m:], until)
                if q:
                    times += rows[:q].min(axis=1).tolist()
                    blocks.append((rows[:q], span[:q, None]))
                    starts = rows[q]
                    m += q
                    continue
            d = self._durations(ys[m], starts, 0.0, jts[m])
            nxt = starts + d
            if nxt.min() < starts.max():
                break   # a rank would end this iteration before the last one starts it: virtual time would go back
            times.append(t)
            blocks.append((starts[None, :], d[None, :]))
            starts = nxt
            m += 1
        if not times:
            return None
        plan.starts, plan.durations = np.empty((len(times), st.n_ranks)), np.empty((len(times), st.n_ranks))
        k = 0
        for a, b in blocks:
            plan.starts[k:k + len(a)] = a
            plan.durations[k:k + len(a)] = b
            k += len(a)
        self._stretches[job_id] = plan
        return plan.durations

    def fast_forward_kept(self, job_id: int, reached: int) -> int:
        """After a decision for another job: how many iterations of job ``job_id``'s stretch still stand (at least the
        ``reached`` ones): those whose decision times come before what the policy's promise keeps
        (:meth:`~controllers.base.Policy.standing`)."""
        plan = self._stretches.get(job_id)
        if plan is None:
            return reached
        plan.until = self.policy.standing(job_id, plan.until)
        return max(reached, bisect.bisect_left(plan.times, plan.until))

    def fast_forwarded(self, job_id: int, decided: int, predicted: int, length: int) -> None:
        """Apply the stretch's first ``decided`` decisions and ``predicted`` predictions (those not applied yet) as
        :meth:`mode_for` and :meth:`predict` would have: the job's tables, counts, spans and pending mark, and the
        policy's :meth:`~controllers.base.Policy.fast_forwarded`."""
        t0 = self._clock()
        try:
            self._fast_forwarded(job_id, decided, predicted, length)
        finally:
            self._director_s += time.perf_counter() - t0

    def _fast_forwarded(self, job_id: int, decided: int, predicted: int, length: int) -> None:
        plan = self._stretches[job_id]
        st = self.states[job_id]
        plan.truncate(length)
        a, b = plan.decided, decided
        if b > a:
            its = range(plan.first + a, plan.first + b)
            st.load[its.start:its.stop] = plan.load
            if plan.flow is not None:
                sets = self._sets.setdefault(job_id, {})
                for it in its:
                    sets[it] = plan.corunners
                st.flow[its.start:its.stop] = plan.flow
            st.decide(Mode.PREDICT, b - a)
            self.policy.fast_forwarded(job_id, st.n_iterations, its, plan.times[a:b])
            plan.decided = b
        a, b = plan.predicted, predicted
        if b > a:
            cols = slice(plan.first + a, plan.first + b)
            n_bad = int(plan.bad[a:b].sum())
            self.counts["inference_calls"] += b - a
            if n_bad:
                self.counts["fallback_predictions"] += n_bad
                st.fallbacks += n_bad
            st.raw[:, cols] = plan.raw[a:b].T
            starts, durs = plan.starts[a:b], plan.durations[a:b]
            st.pred[:, cols] = durs.T
            spans = list(zip(starts.min(axis=1).tolist(), (starts + durs).max(axis=1).tolist()))  # _predicted's
            self.pred_spans[job_id] += spans
            self.max_span[job_id] = max(self.max_span[job_id], max(e - s for s, e in spans))
            plan.predicted = b
        if plan.decided > plan.predicted:
            self.pending[job_id] = plan.times[plan.decided - 1]   # reached, not yet predicted (mode_for's mark)
        else:
            self.pending.pop(job_id, None)
        if plan.predicted == len(plan.times):
            del self._stretches[job_id]

    # ------------------------------------------------------------------------------------------------ truth
    def on_record(self, rec: IterationRecord, simulated: bool) -> None:
        t0 = time.perf_counter()
        try:
            self._on_record(rec, simulated)
        finally:
            self._director_s += time.perf_counter() - t0

    def on_records(self, records: list[IterationRecord], simulated: bool, spans: list | None = None) -> None:
        """A burst of records (:meth:`Director.on_records`): one timed call for the whole burst. A predicted record
        only moves the clock and the job's timeline (no feed, no truth-window work), which is done inline here, from
        the burst's per-iteration ``spans`` where the backend gives them (the same clock and timeline)."""
        t0 = time.perf_counter()
        try:
            if simulated:
                for rec in records:
                    self._on_record(rec, True)
                return
            if not records:
                return
            if spans is not None:
                self._on_spans(spans)
                return
            by_job: dict[int, list] = {}
            now = self.now
            for rec in records:
                if rec.end > now:
                    now = rec.end
                g = by_job.get(rec.job_id)
                if g is None:
                    g = by_job[rec.job_id] = []
                g.append(rec)
            self.now = now
            states = self.states
            for j, recs in by_job.items():
                st = states.get(j)
                if st is not None:
                    st.record_predicted(recs)
        finally:
            self._director_s += time.perf_counter() - t0

    def _on_spans(self, spans: list) -> None:
        """Predicted records summed up per (job, iteration) (:meth:`Director.on_records`' ``spans``)."""
        now = self.now
        by_job: dict[int, list] = {}
        for sp in spans:
            if sp[4] > now:
                now = sp[4]
            g = by_job.get(sp[0])
            if g is None:
                g = by_job[sp[0]] = []
            g.append(sp)
        self.now = now
        states = self.states
        for j, sps in by_job.items():
            st = states.get(j)
            if st is not None:
                st.record_spans(sps)

    def _on_record(self, rec: IterationRecord, simulated: bool) -> None:
        st = self.states.get(rec.job_id)
        if rec.end > self.now:
            self.now = rec.end
        if st is None or rec.iteration >= st.n_iterations:
            return
        complete = st.record(rec.rank, rec.iteration, rec.start, rec.end, simulated)
        if simulated:
            self.feeds[st.job_id].on_record(rec.rank, rec.iteration, rec.start, rec.end)
        if complete and simulated:
            self._iteration_complete(st, rec.iteration)

    def _edge_correction(self, st: JobState, iteration: int) -> float:
        """When the iteration before the first predicted one is a window edge (see :meth:`_edges`), the job's timeline
        already holds its distorted simulated time; the surrogate's prediction of it from the clean history before it
        replaces that time: the mean over ranks of (prediction - simulated) is returned, to be added to this
        predicted iteration (the job's later iterations shift by it)."""
        e = iteration - 1
        if not (self.correct_edges and self.drop_edges and e >= 0 and e < len(st.modes)
                and st.modes[e] == Mode.SIMULATE and self._edges(st, iteration)[e]):
            return 0.0
        ranks = np.arange(st.n_ranks)
        p = self._predict(st, e, ranks)
        d = st.truth[:, e]
        ok = np.isfinite(p) & np.isfinite(d)
        if not ok.any():
            return 0.0
        c = float(np.mean(p[ok] - d[ok]))
        st.edge_shift += c
        self.counts["edge_corrections"] += 1
        return c

    def _overlaps_prediction(self, st: JobState, a: float, b: float) -> bool:
        """Whether another job was predicted (injected no packets) at some time in (a, b)."""
        for jid, spans in self.pred_spans.items():
            if jid == st.job_id:
                continue
            if self.pending.get(jid, np.inf) < b:
                return True
            reach = self.max_span[jid]
            for s0, e0 in reversed(spans):
                if s0 < b and e0 > a:
                    return True
                if s0 + reach <= a:
                    break
        return False

    def _edges(self, st: JobState, upto: int) -> np.ndarray:
        """The window edges of ``st`` before ``upto`` (:meth:`JobState.window_edges`)."""
        return st.window_edges(upto)

    def _measured_period(self, st: JobState, it: int) -> None:
        """The flow model's co-runner demand of job ``st`` from its first simulated iteration's time (the model's own
        time is far off for latency-bound jobs), and every job's recorded flow value recomputed with it, so that a
        history column and ``flow_now`` are always computed alike."""
        jt = job_time(st.truth[:, it])
        if not (np.isfinite(jt) and jt > 0):
            return
        self.flow.set_period(st.job_id, jt)
        for jid, sets in self._sets.items():
            s = self.states.get(jid)
            if s is not None:
                for i, others in sets.items():
                    s.flow[i] = self.flow.iteration_time(jid, others)

    def _iteration_complete(self, st: JobState, it: int) -> None:
        if self.flow is not None and st.job_id not in self.flow.period:
            self._measured_period(st, it)
        if self.drop_edges:
            st.clean[it] = not self._overlaps_prediction(st, st.lo[it], st.hi[it])
        if st.n_predicted == 0 and not st.fitted and it > 0 and self.drop_edges and st.clean[it]:
            self._warmup_shadow(st, it)
        in_window = st.window_start is not None and it >= st.window_start
        if in_window and st.fitted:
            ranks = np.arange(st.n_ranks)
            shadow = self._predict(st, it, ranks)   # from the history before ``it``: its marks settle after
            truth = st.truth[:, it]
            st.pred[:, it] = shadow
            st.errors.append((it, float(np.mean(np.abs(shadow - truth) / truth) * 100.0)))
            jt = job_time(truth)
            st.signed.append((it, (job_time(shadow) - jt) / jt * 100.0))
            if self.drop_edges and st.clean[it]:
                st.clean_signed.append(st.signed[-1])
        st.settle(it)
        # end of the truth window: the next iteration is not simulated or this is the last one
        nxt = it + 1
        window_over = in_window and (nxt >= st.n_iterations or (nxt < len(st.modes) and
                                                                  st.modes[nxt] == Mode.PREDICT))
        if window_over and not st.fitted:
            self._fit(st, nxt)  # a deferred fit (see _fit)
            st.window_start = None
        elif window_over and self.do_tune:
            self._tune(st, list(range(max(0, st.window_start - self.lookback), it + 1)))
            st.window_start = None

    def _series(self, st: JobState) -> OnlineSeries:
        return self.feeds[st.job_id].series(st)

    def _targets(self, st: JobState, series: OnlineSeries, idx) -> list[int]:
        return self.feeds[st.job_id].targets(st, series, idx)

    def _fit(self, st: JobState, iteration: int) -> None:
        t0 = time.perf_counter()
        feed = self.feeds[st.job_id]
        series = feed.series(st)
        idx = feed.targets(st, series, range(iteration))
        if not feed.can_fit(series, idx):
            # nothing to learn from yet: predictions fall back to the last truth (counted) and the fit is retried
            # at the end of each truth window
            self.counts["deferred_fits"] += 1
            st.fit_deferred = True
            return
        feed.prepare_fit(st, series)
        self.models[st.job_id].fit(series, idx)
        self.wall["tuning"] += time.perf_counter() - t0
        self.counts["fit_calls"] += 1
        st.fitted = True
        if not st.clean_signed and feed.fixed_context and self.drop_edges:
            self._backtest(st, iteration)

    def _warmup_shadow(self, st: JobState, it: int) -> None:
        """A warm-up iteration ``it`` of a model that is cheap to fit (``Surrogate.cheap_fit``) with a feed whose
        context is the truth before an iteration (``JobFeed.fixed_context``): the model is fitted on the history
        before ``it`` and its prediction of ``it`` is scored like a window's shadow prediction (the evidence the
        policy may end the job's warm-up on). The fit is provisional: the job's real fit comes at its first
        prediction, on the whole warm-up."""
        feed, model = self.feeds[st.job_id], self.models[st.job_id]
        if not (model.cheap_fit and feed.fixed_context):
            return
        t0 = time.perf_counter()
        series = feed.series(st)
        idx = feed.targets(st, series, range(it))
        if idx and feed.can_fit(series, idx):
            feed.prepare_fit(st, series)
            model.fit(series, idx)
        self.wall["tuning"] += time.perf_counter() - t0
        self._score_shadow(st, it)

    def _score_shadow(self, st: JobState, it: int) -> None:
        """Record the model's prediction of simulated iteration ``it`` from the history before it as a clean shadow
        error (uncounted as a prediction; a rank the model cannot answer leaves the iteration unscored)."""
        t0 = time.perf_counter()
        ranks = np.arange(st.n_ranks)
        try:
            y = np.asarray(self.models[st.job_id].predict(self._context(st, it, ranks)),
                           dtype=np.float64).reshape(-1)
            y, bad = self._checked(st, it, y, self._last_truth(st, it, ranks))
        except (SurrogateError, HybridError):
            bad = None
        if bad is not None and not bad.any():
            jt = job_time(st.truth[:, it])
            st.clean_signed.append((it, (job_time(y) - jt) / jt * 100.0))
        self.wall["inference"] += time.perf_counter() - t0

    def _backtest(self, st: JobState, upto: int) -> None:
        """Shadow predictions of the job's last :data:`BACKTEST` clean simulated iterations before ``upto`` (its
        warm-up, at its first fit), each from the history before it, recorded like a window's: the evidence a
        policy has of the model before any window (a model that predicts the warm-up well is trusted sooner). Only
        for feeds whose context is the truth before an iteration (``JobFeed.fixed_context``); a rank the model
        cannot answer is left out, uncounted."""
        for it in [i for i in st.visible if 0 < i < upto and st.clean[i]][-BACKTEST:]:
            self._score_shadow(st, it)

    def _tune(self, st: JobState, idx: list[int]) -> None:
        t0 = time.perf_counter()
        feed = self.feeds[st.job_id]
        series = feed.series(st)
        self.models[st.job_id].tune(series, feed.targets(st, series, idx))
        self.wall["tuning"] += time.perf_counter() - t0
        self.counts["tune_calls"] += 1

    # ------------------------------------------------------------------------------------------------ results
    def per_iteration_columns(self, records: list[IterationRecord]) -> dict[str, list]:
        """Extra iterations.parquet columns aligned with ``records``: mode, predicted, truth."""
        mode, pred, truth = [], [], []
        for r in records:
            st = self.states.get(r.job_id)
            if st is None or r.iteration >= st.n_iterations:
                mode.append(Mode.SIMULATE.value)
                pred.append(math.nan)
                truth.append(r.end - r.start)
                continue
            m = st.modes[r.iteration] if r.iteration < len(st.modes) else Mode.SIMULATE
            mode.append(m.value)
            pred.append(float(st.pred[r.rank, r.iteration]))
            truth.append(float(st.truth[r.rank, r.iteration]))
        return {"mode": mode, "predicted": pred, "truth": truth}

    def summary(self) -> dict:
        jobs = {}
        for st in self.states.values():
            if st is None:
                continue
            n_pred = st.n_predicted
            errs = [e for _, e in st.errors]
            jobs[st.job] = {
                "simulated_iterations": st.n_simulated,
                "predicted_iterations": n_pred,
                "surrogate_fraction": n_pred / max(len(st.modes), 1),
                "truth_window_mape": float(np.mean(errs)) if errs else None,
                "truth_window_errors": st.errors,
                "fallback_predictions": st.fallbacks,
                "edge_shift_ns": st.edge_shift,
            }
        return {"policy": self.policy_name if self.truth_reason is None else "pdes",
                "runs_truth": self.truth_reason,
                "surrogate": self.surrogate.name if self.surrogate else None,
                "lookback": self.lookback,
                "keep_background": self.keep_background, "wall": self.wall_split(), "counts": dict(self.counts),
                "last_refused_prediction": self.last_refusal,
                "jobs": jobs}
