"""Plan-ahead forms: what a policy decides when every decision must be made before the run starts.

A backend that cannot be paused per iteration (CODES: its director switches ranks at iteration numbers written into
its configuration before it starts, ``codes_bridge.hybrid``) runs a policy dry on a virtual clock, where no error,
cost or truth is measured. A policy whose schedule follows what the run measures (``confident``) would then never
leave its most cautious setting; :meth:`Policy.ahead <controllers.base.Policy.ahead>` gives instead the schedule it
can promise in advance, which a dry run reproduces exactly. This module holds those forms.

:class:`ConfidentAhead` is ``confident``'s. What ``confident`` does first, before any window is scored, is known in
advance: every job is simulated through its warm-up, whose stationarity test needs ``probe`` completed iterations,
and a job with fewer than ``probe`` iterations after it is exempt (simulated to its end: too short to be worth a
model, and a short stretch predicted from one warm-up is what its bound cannot vouch for). What comes after depends
on the windows' shadow errors, which a plan made before the run cannot have: on a backend where truth windows do
not check predictions (CODES' director scores nothing) a truth window only costs, so the form predicts every warmed
job from its warm-up to its end, and the surrogate is refitted on the warm-up's records. The promise
(``target_error`` per job) is then not bounded but measured: ``hybridsim bench`` compares every job with the pure
run (docs/codes.md section 3).

The form's warm-up is each job's own, with either setting of ``confident``'s ``shared_warmup``: a plan made before
the run has no truth to be biased by a predicted co-runner's stand-in, which is what keeps the live default's
warm-up shared, and no co-runner changes (CODES runs every job from 0); CODES' director then makes the predicted
windows common to all jobs in iteration numbers (``codes_bridge.hybrid.choose_windows``).
"""

from __future__ import annotations

from hybridsim_common.backend import Mode

from .base import JobView, Policy


class ConfidentAhead(Policy):
    """``confident``'s plan-ahead form (module docstring): per job, simulate the first ``probe`` iterations, then
    predict to the end; a job with fewer than ``probe`` iterations after its warm-up (or of unknown length) is
    simulated throughout. Keeps no state: a dry run gives exactly the decisions of a live run."""

    name = "confident-ahead"

    def __init__(self, target_error: float = 2.0, probe: int = 8):
        self.target = float(target_error)
        self.probe = int(probe)

    def exempt(self, n_iterations: int | None) -> bool:
        """Whether a job of ``n_iterations`` is simulated throughout (too short after its warm-up, or open-ended)."""
        return n_iterations is None or n_iterations - self.probe < self.probe

    def decide(self, view: JobView) -> Mode:
        if self.exempt(view.n_iterations) or view.iteration < self.probe:
            return Mode.SIMULATE
        return Mode.PREDICT

    def why_simulated(self, job: str, n_iterations: int | None) -> str | None:
        """One line on why job ``job`` is never predicted by this form (None when it is predicted)."""
        if n_iterations is None:
            return f"{job}: open-ended (no known end to predict towards)"
        if self.exempt(n_iterations):
            return (f"{job}: {n_iterations} iterations, fewer than 2 x probe = {2 * self.probe} (a warm-up of "
                    f"{self.probe} and a predicted stretch at least as long)")
        return None
