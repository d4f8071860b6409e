"""Where ground truth meets the surrogate in a hybrid run: fits, tunes and shadow predictions.

* End of the warm-up: ``surrogate.fit`` on every truth so far, when the policy first answers PREDICT or, if the job's
  feed says so (``fit_at_first_prediction``), at the job's first prediction. When a fit has nothing to learn from
  yet (a graph model after a warm-up of one iteration) it is deferred: predictions fall back to each rank's last
  simulated time (counted as fallbacks) and the fit is retried at the end of every truth window.
* During the warm-up, a model that is cheap to fit (``Surrogate.cheap_fit``) is fitted on each clean iteration's
  history and scored on its prediction of it (:meth:`OnlineFit._warmup_shadow`); another is scored on its last
  :data:`BACKTEST` clean warm-up iterations at its first fit (:meth:`OnlineFit._backtest`). These are the evidence a
  policy may end a job's warm-up on and trust it sooner (``JobView.clean_signed_errors``).
* Inside a truth window (a SIMULATE iteration after predicted ones): once every rank of the job has finished it, the
  surrogate predicts it from the history *before* it (a shadow prediction), and the error is recorded: what
  error-driven policies see.
* End of a truth window: ``surrogate.tune`` on the window (``surrogate.tune`` is told the iteration indices).
* Before a stretch that follows a window edge: the edge's distorted time corrected by the model's prediction of it
  from the clean history before it (:meth:`OnlineFit._edge_correction`).

:class:`OnlineFit` is that part of :class:`hybridsim.hybrid.HybridController`; it reads the controller's ``feeds``,
``models``, ``wall`` and ``counts`` and its ``_context``, ``_checked`` and ``_last_truth``.
"""

from __future__ import annotations

import time

import numpy as np

from surrogate.base import SurrogateError

from hybridsim_common.backend import Mode
from surrogate.online import OnlineSeries

from .fast_forward import HybridError
from .timeline import JobState

#: clean warm-up iterations a job's model is scored on at its first fit (:meth:`OnlineFit._backtest`)
BACKTEST = 8


def job_time(per_rank: np.ndarray) -> float:
    """The iteration time of a job from its ranks' times (what ``sync: job`` and ``skew`` advance it by): the
    statistic its completion follows, the mean over ranks (a bulk-synchronous job's iterations take as long as its
    ranks do together; with right-skewed per-rank times the median would advance it too fast)."""
    per_rank = np.asarray(per_rank, dtype=np.float64)
    return float(np.add.reduce(per_rank, axis=None)) / per_rank.size  # np.mean's sum and division, without its checks


class OnlineFit:
    """The fitting, tuning and scoring half of the hybrid controller (see the module docstring)."""

    def _init_online_fit(self) -> None:
        #: job -> (history key, answer) of the latest prediction of a ``Surrogate.history_only`` model: the same
        #: history gets the same answer until the model's next fit or tune, which forgets it (:meth:`_answer`)
        self._answers: dict[int, tuple] = {}

    def _answer(self, st: JobState, iteration: int, ranks: np.ndarray) -> np.ndarray:
        """The model's per-rank times for ``iteration`` of ``ranks`` (a fresh float64 array): its ``predict`` of the
        feed's context, or, for a ``history_only`` model asked again for the history it last answered (the feed's
        ``history_key``: a predicted stretch, its window's shadow prediction), that answer again (for performance:
        no context and no model call; the same values)."""
        model = self.models[st.job_id]
        key = self.feeds[st.job_id].history_key(st, iteration, ranks) if model.history_only else None
        got = self._answers.get(st.job_id) if key is not None else None
        if got is not None and got[0] == key:
            return got[1].copy()
        y = np.asarray(model.predict(self._context(st, iteration, ranks)), dtype=np.float64).reshape(-1)
        if key is not None:
            self._answers[st.job_id] = (key, y.copy())
        return y

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
        self._answers.pop(st.job_id, None)
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
            self._answers.pop(st.job_id, None)
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
            st.signed.append((it, (job_time(y) - jt) / jt * 100.0))
            st.clean_signed.append(st.signed[-1])
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
        self._answers.pop(st.job_id, None)
        self.wall["tuning"] += time.perf_counter() - t0
        self.counts["tune_calls"] += 1

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
