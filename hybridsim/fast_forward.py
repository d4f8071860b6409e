"""Fast-forward: the hybrid controller's predicted stretches handed to the backend in one call.

When the policy promises, at a PREDICT decision, that the job's next iterations are PREDICT too
(:meth:`controllers.base.Policy.horizon`), the controller hands the backend the whole stretch after that iteration's
prediction (:meth:`FastForward.fast_forward`: one :meth:`surrogate.base.Surrogate.predict_many` call, every rank's
start and duration as the per-iteration calls would compute them) and applies what the skipped ``mode_for`` and
``predict`` calls would have done as the backend reports the stretch reached (:meth:`FastForward.fast_forwarded`); the
results are the per-iteration path's (hybridsim/engine/README.md, "Fast-forward"). A stretch costs the controller one
call and a few array operations whatever its length: no per-iteration or per-rank Python.

:class:`FastForward` is the part of :class:`hybridsim.hybrid.HybridController` that does this; it reads the
controller's per-job state (``states``, ``feeds``, ``models``, the policy, the co-runner feed) and its ``_context``,
``_checked``, ``_last_truth`` and ``_durations``, which :mod:`hybridsim.hybrid` defines.
"""

from __future__ import annotations

import bisect
import math
import time

import numpy as np

from hybridsim_common.backend import Mode


def _job_span(jt: float, corr: float) -> float:
    """A ``sync: job`` iteration's length from the latest start: the job time ``jt`` shifted by the edge correction
    ``corr``, never below :data:`EDGE_FLOOR` of it."""
    return max(jt + corr, EDGE_FLOOR * jt)


#: an edge correction never shortens a predicted iteration below this fraction of the prediction
EDGE_FLOOR = 0.1


class HybridError(RuntimeError):
    pass


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


class FastForward:
    """The fast-forward half of the hybrid controller (see the module docstring)."""

    def _init_fast_forward(self) -> None:
        #: job -> (iteration, n, until), the policy's horizon after its latest PREDICT (dropped by any other
        #: decision); job -> the stretch granted on it (:class:`_Stretch`) until all of it is applied
        self._horizon: dict[int, tuple[int, int, float]] = {}
        self._stretches: dict[int, _Stretch] = {}

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
        if not self.corunner_feed.ready(self.running, self.states):
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
            pace = float(np.add.reduce(st.pred[:, iteration]) / st.n_ranks)   # np.mean's sum and division
            if pace > 0:
                n = min(n, int((until - float(ends.min())) / pace * 1.25) + 4)
        first = iteration + 1
        ranks = np.arange(st.n_ranks)
        # the decisions' co-runners: the same at every boundary of a stretch (no job starts, ends or completes its
        # iterations in one: the backend ends it then)
        corunners = self._corunners(job_id, Mode.PREDICT)
        load = self.corunner_feed.load(job_id, corunners)
        flow = self.corunner_feed.flow_time(job_id, corunners)
        model = self.models[job_id]
        if model.history_only:   # one answer repeated (Surrogate.history_only), the prediction's just made if it is
            t0 = time.perf_counter()
            ys = np.repeat(self._answer(st, first, ranks)[None, :], n, axis=0)
        else:
            keep = st.load[first], st.flow[first]
            st.load[first] = load   # the context reads the decision's co-runner load (and flow), as after mode_for
            if flow is not None:
                st.flow[first] = flow
            try:
                ctx = self._context(st, first, ranks)
            finally:
                st.load[first], st.flow[first] = keep
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
            self.corunner_feed.decided(st, its, plan.corunners, plan.load, plan.flow)
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
            self.silences.predicted(job_id, spans)
            plan.predicted = b
        if plan.decided > plan.predicted:
            self.silences.stopped(job_id, plan.times[plan.decided - 1])   # reached, not yet predicted (mode_for's)
        else:
            self.silences.pending.pop(job_id, None)
        if plan.predicted == len(plan.times):
            del self._stretches[job_id]
