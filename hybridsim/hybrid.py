"""The hybrid controller: the :class:`~hybridsim_common.backend.Director` that joins a policy and a surrogate.

Per job it keeps the (ranks x iterations) tables of truth (simulated iteration times), predictions and modes. At each
iteration boundary it builds a :class:`~controllers.base.JobView`, asks the policy for the mode, and validates the
answer. For predicted iterations it builds each rank's look-back (truth where simulated, the earlier prediction where
not) and asks the surrogate for the next iteration time of every rank in one batch.

Ground truth meets the surrogate at the end of the warm-up (the fit), inside truth windows (shadow predictions,
scored) and at their ends (the tune): :mod:`hybridsim.online_fit`. What each model sees comes from a per-job feed
chosen once from the model (:func:`surrogate.online.feed_for`); what a decision records of the job's co-runners, from
:class:`hybridsim.corunners.CorunnerFeed`. A predicted stretch the policy promises is handed to the backend in one call
(:mod:`hybridsim.fast_forward`); when other jobs were silent (predicted) is kept in :class:`hybridsim.timeline.Silences`,
which makes window edges.

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

A prediction that is not finite, not positive or more than ``MAX_RATIO`` (100x) away from the rank's last simulated
time, or refused by the model (``SurrogateError``: also counted in ``refused_predictions``), is replaced by that time
and counted (``counts["fallback_predictions"]``): a model fitted on a short warm-up can extrapolate into a collapse.

Wall time is split into simulation (the backend's time between director calls), controller (the director's calls
themselves, less the surrogate's share: views, policy, bookkeeping), inference and tuning; building graphs for a
context counts as inference, for a fit/tune series as tuning. Policies see all four in ``JobView.costs``.

Per decision and per prediction the controller's work does not grow with the iterations a job has run: the job's
timeline (:class:`hybridsim.timeline.JobState`) is kept up to date as records arrive; a policy's view reads it lazily.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from controllers.base import JobView, Policy, PolicyError
from surrogate.base import Context, JobInfo, Surrogate, SurrogateError
from surrogate.online import Feeds, JobFeed
from surrogate.volumes import relative_volumes

from hybridsim_common.backend import Director, Mode
from hybridsim_common.records import IterationRecord, RecordRows, iteration_columns
from .corunners import CorunnerFeed
from .online_fit import OnlineFit, job_time
from .fast_forward import EDGE_FLOOR, FastForward, HybridError, _job_span
from .timeline import JobState, Lazy, Silences


#: a per-rank prediction more than this factor away from the rank's last simulated iteration time (or not finite,
#: or <= 0) is a model failure: that time is used instead and ``counts["fallback_predictions"]`` counts it
MAX_RATIO = 100.0

SYNCS = ("job", "skew", "rank")   # how a predicted iteration ends on the ranks of a job (scenario controller.sync)


@dataclass(frozen=True)
class ControllerSettings:
    """How a hybrid run's loop behaves (the scenario's ``controller`` and ``surrogate`` sections; README "The hybrid
    loop and policies"). ``keep_background``: what stands in for a predicted job's traffic; ``lookback``: history
    per rank a model sees (default: the models' own); ``tune``: tune the model at the end of each truth window;
    ``policy_name``: the policy's name in the summary; ``sync``: how a predicted iteration ends on the ranks of a job
    (:data:`SYNCS`); ``drop_edges``: window edges left out of what the models see; ``history``: what a model's
    look-back holds (truth, window, mixed); ``correct_edges``: an edge's distorted time corrected by the model;
    ``stream``: jobs start and end when a scheduler says; ``truth_reason``: the default controller runs the truth,
    and why (:mod:`hybridsim.estimate`)."""

    keep_background: bool | str = True
    lookback: int | None = None
    tune: bool = True
    policy_name: str | None = None
    sync: str = "skew"
    drop_edges: bool = True
    history: str = "truth"
    correct_edges: bool = True
    stream: bool = False
    truth_reason: str | None = None


class HybridController(OnlineFit, FastForward, Director):
    """Director for a hybrid run. ``jobs`` = list of (name, workload kind, n_ranks, n_iterations or None);
    ``surrogate`` = one model per job id (dict) or a single model instance deep-copied per job (a model is fitted
    and tuned on its own job's truth only).

    ``settings``: :class:`ControllerSettings`. ``settings.stream``: the jobs start and end when a scheduler says (the backend calls :meth:`on_job_start` and
    :meth:`on_job_end`): a job's state and feed are created when it starts, it is simulated until its policy has
    history to predict from, and policies see the running jobs in ``JobView.running``."""

    def __init__(self, jobs, policy: Policy, surrogate: Surrogate | dict[int, Surrogate],
                 settings: ControllerSettings | None = None, *, volumes: dict[int, np.ndarray] | None = None,
                 shape=None, placement=None, infos: dict[int, JobInfo] | None = None, flow=None):
        settings = settings if settings is not None else ControllerSettings()
        self.settings = settings
        keep_background, lookback, tune, policy_name = (settings.keep_background, settings.lookback, settings.tune,
                                                        settings.policy_name)
        sync, drop_edges, history, correct_edges, stream = (settings.sync, settings.drop_edges, settings.history,
                                                            settings.correct_edges, settings.stream)
        self.policy = policy
        #: why the default controller runs the truth instead (hybridsim.estimate: a hybrid run cannot pay), or None
        self.truth_reason = settings.truth_reason
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
        #: what each decision records of the job's co-runners (load; flow-model times when ``flow``, the run's
        #: :class:`hybridsim.flow.FlowModel`, is given: :func:`hybridsim.corunners.flow_for` makes it for the models
        #: that read it)
        self.corunner_feed = CorunnerFeed(self.jobs, self.infos, flow)
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
        #: when each job was predicted (silent): what makes another job's simulated iteration an edge
        self.silences = Silences(self.states)
        self.last_refusal: str | None = None  # the latest SurrogateError a model raised at a prediction (summary)
        self.counts = {"inference_calls": 0, "tune_calls": 0, "fit_calls": 0, "deferred_fits": 0,
                       "fallback_predictions": 0, "edge_corrections": 0, "refused_predictions": 0}
        self._init_fast_forward()
        self._init_online_fit()

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
        self.corunner_feed.place(job_id, terminals)
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
            change_error=self.models[st.job_id].change_error(st.workload))

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
        self.corunner_feed.decided(st, range(iteration, iteration + 1), self._corunners(job_id, mode))
        if mode == Mode.PREDICT and iteration == 0:
            raise PolicyError(f"policy {self.policy_name!r} asked to predict job {st.job!r} iteration 0: there is "
                              "no history to predict from; simulate at least one iteration first")
        if (mode == Mode.PREDICT and not st.fitted and not st.fit_deferred
                and not self.feeds[job_id].fit_at_first_prediction):
            self._fit(st, iteration)
        if mode == Mode.SIMULATE and st.modes and st.modes[-1] == Mode.PREDICT:
            st.window_start = iteration
        if mode == Mode.PREDICT:
            self.silences.stopped(job_id, self.now)   # its first rank stops injecting now (the others as they get here)
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

    def _corunner_load(self, job_id: int, mode: Mode) -> float:
        """The co-runner load of job ``job_id`` now (:meth:`CorunnerFeed.load` of :meth:`_corunners`)."""
        return self.corunner_feed.load(job_id, self._corunners(job_id, mode))

    def _context(self, st: JobState, iteration: int, ranks: np.ndarray) -> Context:
        return self.feeds[st.job_id].context(st, iteration, ranks)

    def _predict(self, st: JobState, iteration: int, ranks: np.ndarray) -> np.ndarray:
        model = self.models[st.job_id]
        if st.fitted:
            t0 = time.perf_counter()
            try:
                y = self._answer(st, iteration, ranks)
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
        n_bad = int(np.count_nonzero(bad))
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
        if len(col) and col.min() >= 0:   # every rank has one (the usual case): no NaN to place (for performance)
            c = col
            out = st.truth[ranks, c]
        else:
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
        self.silences.predicted(st.job_id, [(float(starts.min()), float((starts + d).max()))])

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
            if simulated:   # the engine's RecordRows are read as rows (no record objects: for performance)
                for j, rank, it, start, end in (records.rows if type(records) is RecordRows else
                                                ((r.job_id, r.rank, r.iteration, r.start, r.end) for r in records)):
                    self._take(j, rank, it, start, end, True)
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
        self._take(rec.job_id, rec.rank, rec.iteration, rec.start, rec.end, simulated)

    def _take(self, job_id: int, rank: int, it: int, start: float, end: float, simulated: bool) -> None:
        """One record, field by field: the clock, the job's timeline, its feed (``JobFeed.reads_records``)."""
        st = self.states.get(job_id)
        if end > self.now:
            self.now = end
        if st is None or it >= st.n_iterations:
            return
        complete = st.record(rank, it, start, end, simulated)
        if simulated and self.feeds[job_id].reads_records:
            self.feeds[job_id].on_record(rank, it, start, end)
        if complete and simulated:
            self._iteration_complete(st, it)

    def _edges(self, st: JobState, upto: int) -> np.ndarray:
        """The window edges of ``st`` before ``upto`` (:meth:`JobState.window_edges`)."""
        return st.window_edges(upto)

    def _iteration_complete(self, st: JobState, it: int) -> None:
        self.corunner_feed.first_truth(st, it, self.states)
        if self.drop_edges:
            st.clean[it] = not self.silences.overlaps(st.job_id, st.lo[it], st.hi[it])
        if st.n_predicted == 0 and not st.fitted and it > 0 and self.drop_edges and st.clean[it]:
            self._warmup_shadow(st, it)
        in_window = st.window_start is not None and it >= st.window_start
        if in_window and st.fitted:
            ranks = np.arange(st.n_ranks)
            shadow = self._predict(st, it, ranks)   # from the history before ``it``: its marks settle after
            truth = st.truth[:, it]
            st.pred[:, it] = shadow
            st.errors.append((it, float(np.add.reduce(np.abs(shadow - truth) / truth) / len(truth) * 100.0)))
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

    # ------------------------------------------------------------------------------------------------ results
    def per_iteration_columns(self, records) -> dict[str, list]:
        """Extra iterations.parquet columns aligned with ``records``: mode, predicted, truth (read job by job from
        the records' columns)."""
        c = iteration_columns(records)
        jid, rank, it = c["job_id"], c["rank"], c["iteration"]
        mode = np.full(len(jid), Mode.SIMULATE.value, dtype=object)
        pred = np.full(len(jid), math.nan)
        truth = c["end"] - c["start"]   # a job without a timeline, or an iteration past its last
        for j, st in self.states.items():
            if st is None:
                continue
            sel = np.flatnonzero((jid == j) & (it < st.n_iterations))
            if not len(sel):
                continue
            r, i = rank[sel], it[sel]
            modes = np.array([m.value for m in st.modes] + [Mode.SIMULATE.value], dtype=object)
            mode[sel] = modes[np.minimum(i, len(st.modes))]   # not decided yet: simulate
            pred[sel] = st.pred[r, i]
            truth[sel] = st.truth[r, i]
        return {"mode": mode.tolist(), "predicted": pred.tolist(), "truth": truth.tolist()}

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
