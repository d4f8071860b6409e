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
``budget``          picks the predicted stretch that meets a ``target_speedup`` by Amdahl's law,
                    speedup = 1 / ((1 - f) + f / s), with ``s`` the measured cost ratio of a simulated to a predicted
                    iteration (``assumed_ratio`` until measured).
"""

from __future__ import annotations

import math

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

    def describe(self) -> dict:
        return {"policy": self.name, "warmup": self.warmup}


class _Cyclic(Policy):
    """Warm-up, then alternate predicted stretches of ``self.interval(view)`` iterations with truth windows."""

    def __init__(self, warmup: int = 8, truth: int = 1):
        self.warmup = _check_int("warmup", warmup, 1)
        self.truth = _check_int("truth", truth, 1)

    def interval(self, view: JobView) -> int:
        raise NotImplementedError

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

    def describe(self) -> dict:
        return {"policy": self.name, "warmup": self.warmup, "ft": self.ft, "truth": self.truth}


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

    def describe(self) -> dict:
        return {"policy": self.name, "warmup": self.warmup, "truth": self.truth, "threshold": self.threshold,
                "min_interval": self.min_interval, "max_interval": self.max_interval}


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

    def describe(self) -> dict:
        return {"policy": self.name, "target_speedup": self.target, "warmup": self.warmup, "truth": self.truth}


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
        if js.asked is not None and view.iteration == js.iteration + 1:
            js.length = now - js.asked
        js.asked = now
        js.n_iterations, js.iteration = view.n_iterations, view.iteration
        ended = self.on_job_end and self._job_ended(now)
        if self.phase == "forward":
            if ended:
                self.next_open = min(self.next_open, now)
            if now < self.next_open or js is not self._leader():
                return PRED
            self._open(now)
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

    def _leader(self) -> _JobSlot | None:
        """The unfinished job with the longest latest iteration."""
        live = [s for s in self.jobs.values() if not self._finishing(s)]
        return max(live, key=lambda s: s.length) if live else None

    def _open(self, now: float) -> None:
        self.phase, self.opened = "window", now
        for s in self.jobs.values():
            s.first, s.done, s.error = None, False, None

    def _close(self, now: float) -> None:
        length = now - self.opened
        if self.phase == "warmup":
            length *= self.truth / self.warmup   # the warm-up is ``warmup / truth`` windows long
        elif self.threshold is not None:
            errs = [s.error for s in self.jobs.values() if s.error is not None]
            if errs and max(errs) <= self.threshold:
                self.ft = min(self.ft * 2, self.max_ft)
            elif errs:
                self.ft = max(self.ft // 2, self.min_ft)
        self.phase = "forward"
        self.next_open = now + (self.ft - 1) * max(length, 0.0)
        for s in self.jobs.values():
            s.first, s.done = None, False

    def describe(self) -> dict:
        return {"policy": self.name, "warmup": self.warmup, "ft": self.ft, "truth": self.truth,
                "threshold": self.threshold, "on_job_end": self.on_job_end}


BUILTIN = {cls.name: cls for cls in (Pdes, SurrogateOnly, Periodic, ErrorAdaptive, Budget, Aligned)}
