"""Built-in policies.

``pdes``            always simulate.
``surrogate``       simulate a warm-up of ``warmup`` iterations, then always predict.
``periodic``        SMART's schedule: warm-up ``warmup``, then cycles of ``ft - truth`` predicted iterations followed by
                    a truth window of ``truth`` simulated iterations (so truth comes back every ``ft`` iterations).
``error-adaptive``  like periodic, but the predicted stretch doubles (up to ``max_interval``) while the error measured
                    in the last truth window stays under ``threshold`` %, and halves (down to ``min_interval``) when it
                    rises above it.
``aligned``         SMART's schedule in virtual time, shared by every job: the whole system is simulated during a
                    warm-up (until every job has run ``warmup`` iterations) and during truth windows (until every job
                    has run ``truth`` iterations in it), and fast-forwarded by the surrogate between them for
                    ``ft - 1`` window lengths. The simulated iterations of one job meet the traffic of the others, as
                    in the pure simulation; with ``threshold`` the gap doubles (up to ``max_ft``) after a window where
                    every job's summed shadow predictions are within ``threshold`` % of its summed truth (the
                    window's completion-time error) and halves when they are not. A job's end (the others' traffic
                    changes) opens a window at once (``on_job_end``, default on). In a job stream a job that starts
                    mid-run has no history: its first ``warmup`` iterations are simulated whatever the phase (beside
                    the others' predicted load), and jobs that left (``JobView.running``) are forgotten.
``confident``       ``aligned``'s shared windows, spent where the model is unsure: one knob, ``target_error`` (% of each
                    job's completion time). Each job keeps a Student prediction bound on its completion error from the
                    signed job-level errors of its earlier windows' shadow predictions (:func:`completion_bound`),
                    and the gap to the next window is the longest that keeps every job within the budget
                    (:meth:`Confident.largest_ft`). The warm-up ends when every job's iteration times pass a
                    stationarity test (:func:`stationary`), not after a fixed count; a co-runner's start or end opens
                    a window unless every other job's bound on one predicted stretch is already within the budget.
``budget``          picks the predicted stretch that meets a ``target_speedup`` by Amdahl's law,
                    speedup = 1 / ((1 - f) + f / s), with ``s`` the measured cost ratio of a simulated to a predicted
                    iteration (``assumed_ratio`` until measured).

Over 600 lines: the seven built-in policies share the window machinery (``aligned``'s slots, phases and promises, on
which ``confident`` builds), which one module keeps in reading order.
"""

from __future__ import annotations

import functools
import math
from statistics import NormalDist

import numpy as np

from hybridsim_common.backend import Mode

from .base import JobView, Policy

SIM, PRED = Mode.SIMULATE, Mode.PREDICT


#: the bound of every integer parameter (iteration counts and intervals): more iterations than any job can have
MAX_PARAM = 2**31 - 1


def _check_int(name: str, v, lo: int, hi: int = MAX_PARAM) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        shown = repr(v) if len(repr(v)) <= 40 else f"{repr(v)[:37]}..."
        raise ValueError(f"{name} must be an integer >= {lo} and <= {hi}, got {shown}")
    return v


def _check_float(name: str, v) -> float:
    try:
        x = float(v)
    except (TypeError, ValueError, OverflowError):
        x = math.nan
    if isinstance(v, bool) or not math.isfinite(x):
        raise ValueError(f"{name} must be a finite number, got {v!r}")
    return x


class Pdes(Policy):
    name = "pdes"

    def decide(self, view: JobView) -> Mode:
        return SIM


class SurrogateOnly(Policy):
    name = "surrogate"

    def __init__(self, warmup: int = 8):
        self.warmup = _check_int("warmup", warmup, 1)

    def decide(self, view: JobView) -> Mode:
        return SIM if view.iteration < self.warmup else PRED

    def horizon(self, view: JobView) -> tuple[int, float]:
        return MAX_PARAM, math.inf

    def standing(self, job_id: int, until: float) -> float:
        return until


class _Cyclic(Policy):
    """Warm-up, then alternate predicted stretches of ``self.interval(view)`` iterations with truth windows."""

    def __init__(self, warmup: int = 8, truth: int = 1):
        self.warmup = _check_int("warmup", warmup, 1)
        self.truth = _check_int("truth", truth, 1)

    def interval(self, view: JobView) -> int:
        raise NotImplementedError

    def horizon(self, view: JobView) -> tuple[int, float]:
        """After a PREDICT: the rest of the predicted stretch (its length only depends on the job's own modes and,
        for ``error-adaptive``, on errors that only truth windows add)."""
        run = view.run_length(PRED) if view.mode == PRED else 0
        return max(0, self.interval(view) - run - 1), math.inf

    def standing(self, job_id: int, until: float) -> float:
        return until  # another job's decision does not touch this job's stretch

    def decide(self, view: JobView) -> Mode:
        if view.iteration < self.warmup:
            return SIM
        if view.mode == PRED:
            return SIM if view.run_length(PRED) >= self.interval(view) else PRED
        # previous was simulated: finish the truth window, then predict
        return PRED if view.run_length(SIM) >= self.truth or view.iteration == self.warmup else SIM


class Periodic(_Cyclic):
    name = "periodic"

    def __init__(self, warmup: int = 8, ft: int = 8, truth: int = 1):
        super().__init__(warmup, truth)
        self.ft = _check_int("ft", ft, 2)
        if self.truth >= self.ft:
            raise ValueError(f"truth window ({truth}) must be shorter than ft ({ft})")

    def interval(self, view: JobView) -> int:
        return self.ft - self.truth


class ErrorAdaptive(_Cyclic):
    name = "error-adaptive"

    def __init__(self, warmup: int = 8, truth: int = 1, threshold: float = 2.0, min_interval: int = 2,
                 max_interval: int = 64, start_interval: int = 8):
        super().__init__(warmup, truth)
        self.threshold = _check_float("threshold", threshold)
        self.min_interval = _check_int("min_interval", min_interval, 1)
        self.max_interval = _check_int("max_interval", max_interval, self.min_interval)
        self.start_interval = min(max(_check_int("start_interval", start_interval, 1), self.min_interval),
                                  self.max_interval)
        self._interval: dict[int, int] = {}
        self._seen_errors: dict[int, int] = {}

    def interval(self, view: JobView) -> int:
        cur = self._interval.get(view.job_id, self.start_interval)
        n = len(view.errors)
        if n > self._seen_errors.get(view.job_id, 0):
            self._seen_errors[view.job_id] = n
            err = view.errors[-1][1]
            cur = min(cur * 2, self.max_interval) if err <= self.threshold else max(cur // 2, self.min_interval)
        self._interval[view.job_id] = cur
        return cur

    def decide(self, view: JobView) -> Mode:
        self.interval(view)  # fold in new errors as soon as they exist
        return super().decide(view)

    def horizon(self, view: JobView) -> tuple[int, float]:
        """From the stretch's second iteration on: at its first, the truth window's last iteration may still be
        completing on some ranks, and its error, landing later, would change the interval."""
        return super().horizon(view) if view.mode == PRED else (0, -math.inf)


class Budget(_Cyclic):
    name = "budget"

    def __init__(self, target_speedup: float = 10.0, warmup: int = 8, truth: int = 1, assumed_ratio: float = 100.0,
                 max_interval: int = 1024):
        super().__init__(warmup, truth)
        if not _check_float("target_speedup", target_speedup) > 1:
            raise ValueError(f"target_speedup must be > 1, got {target_speedup}")
        self.target = float(target_speedup)
        self.assumed_ratio = _check_float("assumed_ratio", assumed_ratio)
        self.max_interval = _check_int("max_interval", max_interval, 1)

    def surrogate_fraction(self, s: float) -> float:
        """f such that 1 / ((1 - f) + f / s) = target (clipped to [0, 1))."""
        if s <= 1:
            return 0.999
        f = (1 - 1 / self.target) / (1 - 1 / s)
        return min(max(f, 0.0), 0.999)

    def interval(self, view: JobView) -> int:
        c = view.costs or {}
        n_sim = max(c.get("simulated_iterations", 0), 1)
        n_pred = c.get("predicted_iterations", 0)
        sim_cost = c.get("simulate", 0.0) / n_sim
        pred_cost = (c.get("inference", 0.0) + c.get("tuning", 0.0)) / n_pred if n_pred else 0.0
        s = sim_cost / pred_cost if pred_cost > 0 and sim_cost > 0 else self.assumed_ratio
        f = self.surrogate_fraction(s)
        # a cycle of k predicted + truth simulated iterations has f = k / (k + truth)
        k = math.ceil(f * self.truth / (1 - f))
        return max(1, min(k, self.max_interval))

    def horizon(self, view: JobView) -> tuple[int, float]:
        """No promise: the stretch follows the measured wall costs, which change with every call."""
        return 0, -math.inf


class _JobSlot:
    __slots__ = ("n_iterations", "iteration", "first", "done", "error", "asked", "length", "ended")

    def __init__(self):
        self.n_iterations = None
        self.iteration = 0
        self.asked = None       # virtual time of this job's latest decision
        self.length = 0.0       # virtual length of its latest iteration
        self.ended = False      # its end has triggered a window
        self.first = None       # first iteration this job ran in the current window (None: not entered yet)
        self.done = False       # has run enough iterations in the current window
        self.error = None       # completion-time error % of the shadow predictions in the current window

    def observe(self, view: JobView, now: float) -> None:
        """The job asks at ``now`` for ``view.iteration``: the length of its previous iteration, where it is."""
        self.reached(view.iteration, view.n_iterations, now)

    def reached(self, iteration: int, n_iterations: int | None, now: float) -> None:
        """:meth:`observe` of the job reaching ``iteration`` at ``now``."""
        if self.asked is not None and iteration == self.iteration + 1:
            self.length = now - self.asked
        self.asked = now
        self.n_iterations, self.iteration = n_iterations, iteration


class Aligned(Policy):
    """Truth windows shared by all jobs, in virtual time (see the module docstring).

    Per-job schedules (``periodic``) let one job be simulated while the jobs it shares links with are predicted, so
    its ground truth misses their traffic; here every job is simulated or every job is predicted, apart from the
    partial iteration each job needs to reach the switch. A window opens when, at or after its opening time, the
    job with the longest iterations (the *leader*) reaches an iteration boundary; the others join at their next
    boundaries, i.e. within one of their shorter iterations, so the leader's truth iterations run beside the others'
    simulated traffic. It closes at the boundary where the last job completes its quota; jobs that finished their
    quota earlier keep being simulated meanwhile. One policy instance serves all jobs of a run (as the controller
    uses it)."""

    name = "aligned"

    def __init__(self, warmup: int = 1, ft: int = 16, truth: int = 1, threshold: float | None = None,
                 min_ft: int = 2, max_ft: int = 256, on_job_end: bool = True):
        self.on_job_end = bool(on_job_end)
        self.warmup = _check_int("warmup", warmup, 1)
        self.truth = _check_int("truth", truth, 1)
        self.ft = _check_int("ft", ft, 2)
        self.threshold = None if threshold is None else _check_float("threshold", threshold)
        self.min_ft = _check_int("min_ft", min_ft, 2)
        self.max_ft = _check_int("max_ft", max_ft, self.min_ft)
        self.jobs: dict[int, _JobSlot] = {}
        self.phase = "warmup"        # warmup | window | forward
        self.opened = 0.0            # virtual time the current window opened
        self.next_open = math.inf

    def _quota(self) -> int:
        return self.warmup if self.phase == "warmup" else self.truth

    def _finishing(self, js: _JobSlot) -> bool:
        return js.n_iterations is not None and js.iteration >= js.n_iterations - 1

    def decide(self, view: JobView) -> Mode:
        mode = self._decide(view)
        # a job's own warm-up (a stream job starting mid-run has no history to predict from)
        return SIM if view.iteration < self.warmup else mode

    def _decide(self, view: JobView) -> Mode:
        if view.running:
            for jid in [k for k in self.jobs if k not in view.running]:
                left = self.jobs.pop(jid)   # a stream job that ended: the others' traffic changed
                if self.on_job_end and not left.ended and self.phase == "forward":
                    self.next_open = min(self.next_open, float(view.now))
        js = self.jobs.setdefault(view.job_id, _JobSlot())
        now = float(view.now)
        js.observe(view, now)
        if self._fast_forward(js, now, reopen=self.on_job_end and self._job_ended(now)):
            return PRED
        if js.first is None:
            js.first = view.iteration
        elif self.threshold is not None:
            js.error = self._window_error(view, js.first)
        js.done = view.iteration - js.first >= self._quota()
        if all(s.done or self._finishing(s) for s in self.jobs.values()):  # a job in its last iteration ends
            self._close(now)
            return PRED
        return SIM

    @staticmethod
    def _window_error(view: JobView, first: int) -> float | None:
        """|sum of shadow predictions - sum of truth| / sum of truth (%) over the window's completed iterations:
        what the window says about the completion-time error. Per-iteration MAPE would mostly measure rank-level
        noise that averages out over a run."""
        pairs = [(view.predicted[i], view.truth[i]) for i in range(first, min(view.iteration, len(view.truth)))
                 if i < len(view.predicted) and view.predicted[i] is not None and view.truth[i] is not None]
        if not pairs:
            return None
        p, t = (sum(x) for x in zip(*pairs))
        return abs(p - t) / t * 100.0 if t > 0 else None

    def _job_ended(self, now: float) -> bool:
        """A job has (by its last iteration's length) ended since the last window: the traffic the others meet has
        changed, so the surrogates' truth is stale. Each end triggers one window."""
        ended = False
        for s in self.jobs.values():
            if self._finishing(s) and not s.ended and now >= s.asked + s.length:
                s.ended = ended = True
        return ended

    def horizon(self, view: JobView) -> tuple[int, float]:
        """In the forward phase every boundary before the next window's opening time answers PREDICT and only
        moves the job's own slot (:meth:`fast_forwarded`), as long as no job's end can be noticed (``_job_ended``:
        a finishing job's latest boundary plus its iteration length) and the job does not reach its last iteration
        (where it starts finishing, which the others' decisions read)."""
        if view.n_iterations is None:
            return 0, -math.inf
        return max(0, view.n_iterations - 2 - view.iteration), self._until()

    def standing(self, job_id: int, until: float) -> float:
        """What another job's decision leaves of a promise: the same bound, taken again (a window that opened, or
        a job end noticed, moves it)."""
        return min(until, self._until())

    def _until(self) -> float:
        """Before this virtual time every boundary of the forward phase answers PREDICT (``horizon``)."""
        if self.phase != "forward":
            return -math.inf
        until = self.next_open
        for s in self.jobs.values():
            if self._finishing(s) and not s.ended:
                until = min(until, s.asked + s.length)
        return until

    def fast_forwarded(self, job_id: int, n_iterations: int | None, iterations, nows) -> None:
        """Each skipped call only observed the job (its slot's ``reached``); of consecutive iterations the last two
        calls leave the same slot as all of them."""
        js = self.jobs[job_id]
        its, nows = list(iterations)[-2:], list(nows)[-2:]
        for it, now in zip(its, nows):
            js.reached(int(it), n_iterations, float(now))

    def _leader(self) -> _JobSlot | None:
        """The unfinished job with the longest latest iteration."""
        live = [s for s in self.jobs.values() if not self._finishing(s)]
        return max(live, key=lambda s: s.length) if live else None

    def _open(self, now: float) -> None:
        self.phase, self.opened = "window", now
        for s in self.jobs.values():
            s.first, s.done, s.error = None, False, None

    def _fast_forward(self, js: _JobSlot, now: float, reopen: bool) -> bool:
        """Whether job ``js`` is fast-forwarded at ``now``: in the forward phase until the next window opens (at once
        when ``reopen``), which its leader does when it gets there."""
        if self.phase != "forward":
            return False
        if reopen:
            self.next_open = min(self.next_open, now)
        if now < self.next_open or js is not self._leader():
            return True
        self._open(now)
        return False

    def _close(self, now: float) -> None:
        """A window (or the warm-up) closed at ``now``: the next gap, then fast-forward until it has passed."""
        length = self._window_length(now)
        self.ft = self._next_ft(length)
        self.phase = "forward"
        self.next_open = now + (self.ft - 1) * max(length, 0.0)
        for s in self.jobs.values():
            s.first, s.done = None, False

    def _window_length(self, now: float) -> float:
        """The virtual length of one window, from the one that closes at ``now``."""
        length = now - self.opened
        return length * self.truth / self.warmup if self.phase == "warmup" else length  # warm-up: warmup/truth windows

    def _next_ft(self, length: float) -> int:
        """The gap, in window lengths, until the next window: Ft, adapted by ``threshold`` after a window."""
        if self.phase != "warmup" and self.threshold is not None:
            errs = [s.error for s in self.jobs.values() if s.error is not None]
            if errs and max(errs) <= self.threshold:
                return min(self.ft * 2, self.max_ft)
            if errs:
                return max(self.ft // 2, self.min_ft)
        return self.ft


def stationary(series, tol: float, z: float = 1.0) -> bool:
    """Whether iteration times ``series`` (at least 3) have settled: the least-squares trend across them moves the
    level by at most ``tol`` % of the mean, or is lost in the noise (|slope| <= ``z`` standard errors: a flat level
    with noise; ``z`` = 1 leans to calling a trend real, which costs a warm-up iteration more rather than a model
    taught a start transient). A constant series is stationary; a clean trend is not until it flattens."""
    y = [float(v) for v in series]
    n = len(y)
    if n < 3:
        return False
    tm, ym = (n - 1) / 2.0, sum(y) / n
    sxx = sum((t - tm) ** 2 for t in range(n))
    b = sum((t - tm) * (v - ym) for t, v in enumerate(y)) / sxx
    if ym > 0 and abs(b) * (n - 1) / ym * 100.0 <= tol:
        return True
    resid = sum((v - ym - b * (t - tm)) ** 2 for t, v in enumerate(y))
    se = math.sqrt(resid / (n - 2) / sxx)
    return abs(b) <= z * se


def completion_bound(scores, m: float, coverage: float = 0.8) -> float:
    """Bound (%) on the mean error of ``m`` predicted stretches of a job from the signed errors ``scores`` of n earlier
    ones: the two-sided Student prediction bound at ``coverage`` for the mean of m new draws,
    |mean| + t s sqrt(1 / n + 1 / m), s the scores' sample standard deviation and t the Student quantile at
    (1 + coverage) / 2 with n - 1 degrees of freedom. The bias is known to s / sqrt(n) and the stretches' own errors
    average over the m of them; the two are independent, so their spreads add in quadrature. A score is one window's
    error, truth noise included (the hybrid's simulated iteration is not the pure run's), which a stretch of many
    iterations averages away: s over-states a stretch's spread, never under-states it. ``inf`` with fewer than 2
    scores."""
    bias, ts, n = _bias_spread(scores, coverage)
    return bias + ts * math.sqrt(1.0 / n + 1.0 / max(m, 1.0))


def _bias_spread(scores, coverage: float) -> tuple[float, float, int]:
    """(|mean|, t s, n) of :func:`completion_bound`; (inf, inf, 1) with fewer than 2 scores."""
    n = len(scores)
    if n < 2:
        return math.inf, math.inf, 1
    mu = sum(scores) / n
    s = math.sqrt(sum((e - mu) ** 2 for e in scores) / (n - 1))
    return abs(mu), _student(n - 1, (1.0 + coverage) / 2.0) * s, n


def student_two_sided(t: float, dof: int) -> float:
    """P(|T| < ``t``) for Student's T with an integer ``dof`` >= 1 degrees of freedom, in closed form (Abramowitz &
    Stegun 26.7.3-4: with theta = atan(t / sqrt(dof)), a finite series in cos(theta)^2 times sin(theta), plus
    2 theta / pi for odd ``dof``). Exact to rounding; no scipy (whose import alone cost a hybrid run 4 s)."""
    th = math.atan(t / math.sqrt(dof))
    c2, s = math.cos(th) ** 2, math.sin(th)
    if dof % 2 == 0:
        term = total = 1.0
        for k in range(2, dof - 1, 2):   # (1 3 ... (k-1)) / (2 4 ... k) cos^k
            term *= (k - 1) / k * c2
            total += term
        return s * total
    if dof == 1:
        return 2.0 * th / math.pi
    term = total = 1.0
    for k in range(3, dof - 1, 2):       # (2 4 ... (k-1)) / (3 5 ... k) cos^(k-1)
        term *= (k - 1) / k * c2
        total += term
    return 2.0 / math.pi * (th + s * math.cos(th) * total)


@functools.lru_cache(maxsize=256)
def _student(dof: int, q: float) -> float:
    """The Student t quantile ``q`` (in (0.5, 1)) with an integer ``dof`` degrees of freedom: the root of
    :func:`student_two_sided` = 2 q - 1, by bisection to float precision (cached: a policy asks for a few)."""
    target = 2.0 * q - 1.0
    lo, hi = 0.0, 1.0
    while student_two_sided(hi, dof) < target:
        hi *= 2.0
        if hi > 1e12:
            return math.inf
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):
            break
        if student_two_sided(mid, dof) < target:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def truth_noise(series) -> float | None:
    """The iteration-to-iteration noise of a job's true iteration times ``series`` (at least 3), % of their mean:
    sqrt(mean of squared successive differences / 2) (von Neumann's estimator: a slow trend adds little to it, unlike
    to the standard deviation). Model-free: what any prediction of one iteration is off by, however good the model.
    None with fewer than 3 values or a mean <= 0."""
    y = [float(v) for v in series]
    if len(y) < 3:
        return None
    mean = sum(y) / len(y)
    if not mean > 0:
        return None
    d2 = sum((b - a) ** 2 for a, b in zip(y, y[1:])) / (len(y) - 1)
    return math.sqrt(d2 / 2.0) / mean * 100.0


class _ConfSlot(_JobSlot):
    __slots__ = ("warmed", "warm_from", "seen", "scores", "counts", "group_it", "group_sum", "group_n", "noise",
                 "exempt", "clean_from", "per_window", "warm_end", "own", "change_error")

    def __init__(self, warm_from: int):
        super().__init__()
        self.warmed = False       # its own warm-up has ended (stationary iteration times)
        self.exempt = False       # too short to be worth predicting: simulated throughout, holds no one in truth
        self.warm_from = warm_from
        self.seen = 0             # signed shadow errors folded in so far
        self.clean_from = None    # its first iteration in the current window that started with every job simulated
        self.scores: list[float] = []   # signed mean error of each of its latest windows (%)
        self.counts: list[int] = []     # how many iterations each score averages
        self.group_it = -2        # last iteration of the window being folded
        self.group_sum = 0.0
        self.group_n = 0
        self.noise = None         # its truth's iteration-to-iteration noise, % (truth_noise of its warm-up)
        self.per_window = 1.0     # its iterations per window length (the leader's iteration)
        self.warm_end = None      # the iteration its warm-up ended at
        self.own = 0              # iterations of a truth window of its own still to simulate (shared_warmup off)
        self.change_error = None  # its model's own error at a change of co-runners, % (JobView.change_error)


class Confident(Aligned):
    """Shared truth windows (``aligned``) whose spacing follows a calibrated bound on each job's completion error.

    A predicted stretch of a job is off by some relative error e of its iteration time; the job's completion time is
    off by the stretches' errors weighted by their shares of its time: with windows of length W every ft W, a
    predicted share f = (ft - 1) / ft times the mean error of its m stretches. The windows' shadow predictions
    measure e: a window's score is the mean of its signed job-level shadow errors (``JobView.signed_errors``), and
    each of the job's warm-up iterations the model was scored on (the controller scores a model cheap to fit on each
    clean warm-up iteration, others on their last ones at the first fit) is a score of its own. With ``clean``, a
    window stays open for a job until it has run ``truth`` iterations that started after every job had joined it (at
    most ``truth + extra``: the leader runs one edge iteration more than ``aligned``'s) and is scored on those clean
    iterations only (``JobView.clean_signed_errors``: an edge's truth is off by its co-runners' silence, no error of
    the model's). Off by default: measured on mix-72-600 and confirmed on hybrid-72-long and mix-1056-4jobs
    (benchmarks/RESULTS.md, "The default pays"), the longer windows cost LAST, MEAN and ridge a third of their
    speed for no gain in error.

    The score of a window mixes two things: the model's error of the job's level (a bias, which a stretch carries
    whole) and the iteration-to-iteration noise of the truth it is compared with (which a stretch of L iterations
    averages down by sqrt(L)). The job's truth noise sigma is measured without any model on its warm-up
    (:func:`truth_noise`); the windows' scores w_1..w_n (of c_k iterations each) have mean b and variance s^2,
    so the drift of the bias between windows is tau^2 = max(0, s^2 - sigma^2 mean(1 / c_k)). The bound on the mean
    error of m stretches of L iterations is the Student prediction bound at ``coverage``:
    B = |b| + t sqrt(s^2 / n + (tau^2 + sigma^2 / L) / m), t with n - 1 degrees of freedom (:meth:`bound_at`).
    The next gap is the largest ft in [``min_ft``, ``max_ft``] with (ft - 1) / ft B <= ``target_error`` for every
    running job, m being the job's stretches at that gap and L = (ft - 1) times its iterations per window length;
    a job with fewer than 2 windows holds it at ``min_ft``.

    Warm-up: each job's own, until its mean-over-ranks iteration times since its start (the latest ``probe``
    completed ones) pass :func:`stationary` with tolerance ``target_error``, or its model vouches for it (at least
    ``vouch`` warm-up scores whose bound over the rest of the job, :meth:`bound_at`, is within the budget: with two,
    t at one degree of freedom is 3.08 at the default coverage, so only a near-exact model ends a warm-up that
    early; measured: the oracle 19.9 -> 23.5x fewer events on mix-72-600, LAST and ridge unchanged), or
    ``max_warmup`` iterations; every job
    is simulated until all are warm (so each one's warm-up meets the others' traffic), except that a job with fewer
    than ``probe`` iterations left that is not warm yet is *exempt*: simulated to its end (too short to be worth a
    model) and no longer waited for. A stream job starting mid-run is simulated until it passes the same test, and
    its start, like a co-runner's end, opens a window at once unless every other running job's bound on one
    stretch, B(1), is within the budget (the model is trusted to predict the new times), or, with ``trust_changes``
    (default), its model's own error at a change (``JobView.change_error``: the ``flow`` model declares its measured
    68 % band per workload kind, 3.2-3.9 %), scaled to ``coverage``, is.

    With ``shared_warmup: false`` a job's warm-up and its windows at a change are its own where its budget allows.
    A job simulated beside a predicted co-runner meets the co-runner's stand-in (its mean link load), not its
    packets, and runs up to ``standin_bias`` % fast (measured 2-10 %); a warm-up of about ``probe`` iterations beside
    such co-runners costs a job of n iterations up to ``standin_bias`` x ``probe`` / n % of its completion time. A
    job whose budget absorbs that (at most half of ``target_error``) warms up *alone*: simulated, taking no part in
    the shared schedule (it neither holds the warm-up or a window open, nor leads one, nor sets the gap), so the warm
    jobs are predicted meanwhile (the first warm-up closes at the first decision where some job is warm), and its
    start mid-run opens no window for the others. Its model was fitted on that biased truth, so once warm it gets
    its first window as a job does after the shared warm-up, within ``min_ft`` window lengths. Any other job's
    warm-up is shared, as with ``shared_warmup``. A change of co-runners (a job's start or end) gives each warm
    running job whose B(1) is over the budget a truth window of its own (``truth`` iterations from its next
    boundary, scored and tuned like a shared one) while the others stay predicted. ``standin_bias: 0`` lets every
    job warm up alone. Off by default: on the validation scenarios it was not better at equal error
    (benchmarks/RESULTS.md, "Per-job warm-up").
    """

    name = "confident"
    plans_ahead = False   # its gaps follow the windows' measured errors: a dry run holds them at min_ft

    def __init__(self, target_error: float = 2.0, truth: int = 1, coverage: float = 0.8, memory: int = 16,
                 probe: int = 8, max_warmup: int = 32, min_ft: int = 2, max_ft: int = 256, extra: int = 3,
                 clean: bool = False, vouch: int = 2, shared_warmup: bool = True, standin_bias: float = 10.0,
                 trust_changes: bool = True):
        if isinstance(target_error, bool) or not isinstance(target_error, (int, float)) \
                or not 0 < float(target_error) < 100:
            raise ValueError(f"target_error must be a number of percent in (0, 100), got {target_error!r}")
        if isinstance(coverage, bool) or not isinstance(coverage, (int, float)) or not 0 < coverage < 1:
            raise ValueError(f"coverage must be in (0, 1), got {coverage!r}")
        super().__init__(warmup=1, ft=_check_int("min_ft", min_ft, 2), truth=truth, min_ft=min_ft, max_ft=max_ft)
        self.target = float(target_error)
        self.coverage = float(coverage)
        self.memory = _check_int("memory", memory, 2)   # a bias and a spread need two windows
        self.probe = _check_int("probe", probe, 3)
        self.max_warmup = _check_int("max_warmup", max_warmup, 1)
        self.extra = _check_int("extra", extra, 0)
        self.clean = bool(clean)
        self.vouch = _check_int("vouch", vouch, 2)   # a bias and a spread need two scores
        if not isinstance(shared_warmup, bool):
            raise ValueError(f"shared_warmup must be true or false, got {shared_warmup!r}")
        self.shared_warmup = shared_warmup
        self.standin_bias = _check_float("standin_bias", standin_bias)
        if self.standin_bias < 0:
            raise ValueError(f"standin_bias must be >= 0 (% of an iteration), got {standin_bias!r}")
        if not isinstance(trust_changes, bool):
            raise ValueError(f"trust_changes must be true or false, got {trust_changes!r}")
        self.trust_changes = trust_changes
        # a 68 % band (one sigma) scaled to the two-sided coverage's quantile
        self._band = NormalDist().inv_cdf((1.0 + self.coverage) / 2.0) / NormalDist().inv_cdf(0.84)
        self.window_len = 0.0   # virtual length of the latest window (or warm-up window) that closed
        self.joined = None   # virtual time every job had joined the current window (None: not yet)

    # ------------------------------------------------------------------------------------------------ the bound
    def _terms(self, js: "_ConfSlot") -> tuple[float, float, float, float, float] | None:
        """(|b|, t, s^2 / n, tau^2, sigma^2) of job ``js``'s windows (class docstring); None with fewer than 2."""
        n = len(js.scores)
        if n < 2:
            return None
        mu = sum(js.scores) / n
        s2 = sum((e - mu) ** 2 for e in js.scores) / (n - 1)
        sig2 = (js.noise or 0.0) ** 2
        inv_c = sum(1.0 / max(c, 1) for c in js.counts) / len(js.counts) if js.counts else 1.0
        return abs(mu), _student(n - 1, (1.0 + self.coverage) / 2.0), s2 / n, max(0.0, s2 - sig2 * inv_c), sig2

    @staticmethod
    def _bound(terms, m: float, length: float) -> float:
        bias, t, var_bias, tau2, sig2 = terms
        return bias + t * math.sqrt(var_bias + (tau2 + sig2 / max(length, 1.0)) / max(m, 1.0))

    def bound_at(self, js: "_ConfSlot", m: float, length: float) -> float:
        """Bound (%) on the mean error of ``m`` stretches of ``length`` iterations of job ``js`` (class docstring):
        its windows' bias and spread, the truth noise of its warm-up averaged over a stretch."""
        terms = self._terms(js)
        return math.inf if terms is None else self._bound(terms, m, length)

    def largest_ft(self, scores, windows: float, js: "_ConfSlot | None" = None) -> int:
        """The largest ft in [min_ft, max_ft] whose predicted share keeps the completion error of a job within the
        budget, the job being ``windows`` window lengths long (so it has ``windows / ft`` stretches at this gap):
        (ft - 1) / ft * B <= target (``min_ft`` when none does). With the job's slot ``js``, B is
        :meth:`bound_at` (noise separated); without, the scores' own spread (:func:`completion_bound`)."""
        if js is None:   # the scores alone: no noise measured, so their whole spread is the stretches'
            js = _ConfSlot(0)
            js.scores, js.counts = list(scores), [1] * len(scores)
        terms = self._terms(js)
        if terms is None:
            return self.min_ft
        # every ft at once: :meth:`_bound`'s float64 operations, element by element in the same order (IEEE, so the
        # same values as one ft at a time; np.maximum keeps max()'s NaN), and the largest that passes (for
        # performance: a window's close asked up to 255 bounds one by one)
        bias, t, var_bias, tau2, sig2 = terms
        ft = np.arange(self.min_ft, self.max_ft + 1, dtype=np.float64)
        m = np.maximum(windows / ft, 1.0)
        length = np.maximum((ft - 1.0) * js.per_window, 1.0)
        ok = np.flatnonzero((ft - 1.0) / ft * (bias + t * np.sqrt(var_bias + (tau2 + sig2 / length) / m))
                            <= self.target)
        return int(ft[ok[-1]]) if len(ok) else self.min_ft

    def _confident(self, skip: int | None = None) -> bool:
        """Every running (not finishing) job but ``skip`` has its bound on one stretch within the budget."""
        live = [s for k, s in self.jobs.items() if k != skip and not self._finishing(s) and not s.exempt
                and (s.warmed or self._shared(s))]
        return bool(live) and all(s.warmed and self._sure(s) for s in live)

    def _sure(self, s: "_ConfSlot") -> bool:
        """Whether job ``s``'s next prediction after a change of co-runners is trusted: its windows' bound on one
        stretch is within the budget, or (``trust_changes``) its model's own error at changes
        (``JobView.change_error``, a 68 % band) scaled to ``coverage`` is."""
        if self.bound_at(s, 1.0, s.per_window) <= self.target:
            return True
        return self.trust_changes and s.change_error is not None and s.change_error * self._band <= self.target

    def _unsure(self) -> list:
        """The warm running jobs whose bound on one stretch is over the budget: what a change of co-runners gives a
        truth window of its own (``shared_warmup`` off)."""
        return [s for s in self._live() if not self._sure(s)]

    def _fold(self, view: JobView, js: _ConfSlot) -> None:
        """Fold the job's new signed shadow errors on clean iterations into its window scores (contiguous iterations
        are one window); a controller that keeps no edge marks gives them all."""
        errs = getattr(view, "clean_signed_errors", None) if self.clean else None
        if errs is None:
            errs = view.signed_errors
        for k in range(js.seen, len(errs)):
            it, e = errs[k]
            if js.warm_end is None or it < js.warm_end:
                # a shadow prediction of a warm-up iteration (the controller's backtest at its first fit): one
                # iteration, one score
                js.scores.append(float(e))
                js.counts.append(1)
                del js.scores[:-self.memory]
                del js.counts[:-self.memory]
                js.group_it = -2
                continue
            if it != js.group_it + 1 or not js.scores:
                js.scores.append(float(e))
                js.counts.append(1)
                js.group_sum, js.group_n = float(e), 1
                del js.scores[:-self.memory]
                del js.counts[:-self.memory]
            else:
                js.group_sum += float(e)
                js.group_n += 1
                js.scores[-1] = js.group_sum / js.group_n
                js.counts[-1] = js.group_n
            js.group_it = it
        js.seen = len(errs)

    def _warm_check(self, view: JobView, js: _ConfSlot) -> bool:
        """The job's own warm-up is over: its latest ``probe`` completed iterations (the one just run may still be
        completing on some ranks, so it is left out) are stationary, or it has run ``max_warmup``. Its truth noise
        is measured on them when it ends. A job not warm with fewer than ``probe`` iterations left is exempt."""
        if not js.warmed and not js.exempt:
            done = view.iteration - js.warm_from
            hi = view.iteration - 1
            vals = [v for v in (view.truth[i] for i in range(max(js.warm_from, hi - self.probe), hi))
                    if v is not None]
            js.noise = truth_noise(vals)
            left = (view.n_iterations - view.iteration) if view.n_iterations is not None else self.max_warmup
            if done >= self.max_warmup or stationary(vals, self.target) or (
                    len(js.scores) >= self.vouch and self.bound_at(js, 1.0, max(left, 1)) <= self.target):
                js.warmed = True
                js.warm_end = view.iteration
            elif view.n_iterations is not None and view.n_iterations - view.iteration < self.probe:
                js.exempt = True
        return js.warmed or js.exempt

    def ahead(self) -> Policy:
        """Its plan-ahead form (:class:`controllers.ahead.ConfidentAhead`): the warm-up and exemptions it decides
        before any window is scored, then every warmed job predicted to its end; each job's warm-up its own, with
        either ``shared_warmup`` (the form's module docstring says why)."""
        from .ahead import ConfidentAhead

        return ConfidentAhead(target_error=self.target, probe=self.probe)

    # ------------------------------------------------------------------------------------------------ decide
    def decide(self, view: JobView) -> Mode:
        mode = self._decide(view)
        js = self.jobs.get(view.job_id)
        return SIM if view.iteration == 0 or js is None or not js.warmed or js.exempt else mode

    def horizon(self, view: JobView) -> tuple[int, float]:
        """``aligned``'s, from the stretch's second iteration on: at its first, the window's last iteration may still
        be completing on some ranks, and its signed error, folded at the next decision, moves the bound."""
        return super().horizon(view) if view.mode == PRED else (0, -math.inf)

    def standing(self, job_id: int, until: float) -> float:
        """``aligned``'s, and none for a job given a truth window of its own (``shared_warmup`` off)."""
        js = self.jobs.get(job_id)
        return -math.inf if js is not None and js.own > 0 else super().standing(job_id, until)

    def _open(self, now: float) -> None:
        super()._open(now)
        self.joined = None
        for s in self.jobs.values():
            s.clean_from = None
            s.own = 0   # a shared window covers every job's own

    def _changed(self, now: float) -> None:
        """A change of co-runners (a start or an end) in the forward phase: with ``shared_warmup``, a window for
        every job unless every one is sure (B(1) within the budget); without, a window of its own for each job
        that is not."""
        if self.shared_warmup:
            if not self._confident():
                self.next_open = min(self.next_open, now)
            return
        for s in self._unsure():
            s.own = self.truth

    def _close(self, now: float) -> None:
        self.window_len = max(self._window_length(now), 0.0)
        super()._close(now)

    def _shared(self, s: "_ConfSlot") -> bool:
        """Whether job ``s``'s warm-up is shared (the others simulated beside it): always with ``shared_warmup``;
        without, when its budget cannot absorb the stand-in's bias on a warm-up beside predicted co-runners:
        ``standin_bias`` x ``probe`` iterations > half of ``target_error`` x its iterations (open-ended: never)."""
        if self.shared_warmup:
            return True
        return s.n_iterations is not None and self.standin_bias * self.probe > 0.5 * self.target * s.n_iterations

    def _leader(self) -> _JobSlot | None:
        """``aligned``'s, among the jobs not warming up on their own (such a job is simulated whatever the phase
        and leads nothing)."""
        live = [s for s in self.jobs.values()
                if not self._finishing(s) and (s.warmed or s.exempt or self._shared(s))]
        return max(live, key=lambda s: s.length) if live else None

    def _holds(self, s: "_ConfSlot") -> bool:
        """Whether job ``s`` holds the warm-up or the window open. A job warming up on its own (not
        :meth:`_shared`) holds only the first warm-up, and only until some job is warm."""
        if s.done or self._finishing(s):
            return False
        if self._shared(s) or s.warmed or s.exempt:
            return True
        return self.phase == "warmup" and not any(o.warmed and not self._finishing(o) for o in self.jobs.values())

    def _decide(self, view: JobView) -> Mode:
        now = float(view.now)
        change = False
        if view.running:
            for jid in [k for k in self.jobs if k not in view.running]:
                left = self.jobs.pop(jid)   # a stream job that ended: the others' traffic changed
                change = change or not left.ended
        js = self.jobs.get(view.job_id)
        if js is None:
            js = self.jobs[view.job_id] = _ConfSlot(view.iteration)
            js.n_iterations = view.n_iterations   # what _shared reads
            if len(self.jobs) > 1 and self.phase == "forward":
                if self._shared(js):
                    if not self._confident(skip=view.job_id):
                        self.next_open = min(self.next_open, now)   # a co-runner starts: its warm-up runs in a window
                else:
                    change = True   # the others' co-runners changed; the starter warms up on its own
        js.observe(view, now)
        js.change_error = getattr(view, "change_error", None)
        self._fold(view, js)
        was_warm = js.warmed
        if self.phase != "window":
            self._warm_check(view, js)
        if js.warmed and not was_warm and self.phase == "forward" and not self.shared_warmup \
                and self.bound_at(js, 1.0, js.per_window) > self.target:
            # warm beside predicted co-runners, its model fitted on their stand-in's truth: its first window comes
            # as a job's first does after the shared warm-up (the gap at min_ft)
            self.next_open = min(self.next_open, now + (self.min_ft - 1) * self.window_len)
        change = self._job_ended(now) or change
        if self.phase == "forward" and change:
            self._changed(now)
        if self._fast_forward(js, now, reopen=False):
            if js.own > 0 and js.warmed and not js.exempt and not self._finishing(js):
                js.own -= 1
                return SIM
            return PRED
        if js.first is None:
            js.first = view.iteration
        if self.phase == "warmup" or not (js.warmed or js.exempt):
            js.done = self._warm_check(view, js)
        elif js.exempt:
            js.done = True
        elif not self.clean:
            js.done = view.iteration - js.first >= self.truth
        else:
            if self.joined is None and all(s.first is not None or s.exempt or self._finishing(s)
                                           for s in self.jobs.values()):
                self.joined = now   # every job simulated from here: the iterations that start now are clean
                for s in self.jobs.values():
                    if s.first is not None and s.asked is not None and s.asked >= now:
                        s.clean_from = s.iteration
            if js.clean_from is None and self.joined is not None:
                js.clean_from = view.iteration
            js.done = view.iteration - js.first >= self.truth + self.extra or (
                js.clean_from is not None and view.iteration - js.clean_from >= self.truth)
        if not any(self._holds(s) for s in self.jobs.values()):
            self._close(now)
            return PRED
        return SIM

    def _live(self) -> list:
        """The jobs the shared schedule is for: running (not finishing), not exempt, and, when the warm-up is each
        job's own, warm."""
        return [s for s in self.jobs.values() if not self._finishing(s) and not s.exempt
                and (s.warmed or self._shared(s))]

    def _window_length(self, now: float) -> float:
        if self.phase == "warmup":   # one leader iteration per window
            return self.truth * max((s.length for s in self._live()), default=0.0)
        return now - self.opened

    def _next_ft(self, length: float) -> int:
        """The largest gap that keeps every running job's completion-error bound within the budget."""
        ft = self.max_ft
        lead = max((s.length for s in self._live()), default=0.0)
        for s in self._live():
            if s.length > 0 and lead > 0:
                s.per_window = max(1.0, lead / s.length)
            whole = math.inf if s.n_iterations is None else s.n_iterations * s.length
            ft = min(ft, self.largest_ft(s.scores, whole / length if length > 0 else math.inf, s))
        return max(self.min_ft, ft)


BUILTIN = {cls.name: cls for cls in (Pdes, SurrogateOnly, Periodic, ErrorAdaptive, Budget, Aligned, Confident)}
