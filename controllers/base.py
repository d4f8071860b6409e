"""The policy interface.

A policy sees a narrow, read-only :class:`JobView` of one job when the job reaches an iteration boundary and returns
the mode for that iteration: ``"simulate"`` (ground truth from the packet-level backend) or ``"predict"`` (the
surrogate's iteration times). It never sees packets, models or the engine.
"""

from __future__ import annotations

import abc
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from hybridsim_common.backend import Mode


class PolicyError(RuntimeError):
    """A policy raised or returned an invalid decision; the run stops with this message."""


@dataclass(frozen=True)
class JobView:
    """What a policy may look at for one job, at the start of iteration ``iteration``. The per-iteration fields are
    read-only sequences (the hybrid controller hands lazy ones: an entry costs something only when it is read).

    Attributes:
        job, job_id: the job.
        iteration: the iteration about to start (0-based); ``n_iterations`` in total (None for open-ended jobs).
        mode: the mode of the previous iteration (``None`` before the first).
        modes: mode of every earlier iteration, oldest first.
        truth: mean-over-ranks true iteration time (ns) of every earlier iteration; ``None`` where not simulated or not
            yet complete.
        predicted: mean-over-ranks predicted time (ns) of every earlier iteration; ``None`` where not predicted.
        errors: list of ``(iteration, mape_percent)`` measured where a prediction was checked against truth (the
            shadow predictions made inside truth windows).
        signed_errors: list of ``(iteration, signed_percent)`` for the same shadow predictions at job level: the
            job's predicted iteration time (the mean over ranks, what its completion follows) minus its true one, in
            % of the true one. What a predicted stretch does to the job's completion time.
        clean_signed_errors: the entries of ``signed_errors`` whose simulated iteration was *clean*: no other job was
            predicted (silent) while it ran, so its truth is the pure run's up to noise. An edge's truth is off by
            what the co-runners' silence did to it, which is no error of the model's (empty when the controller
            keeps no edge marks, ``controller.drop_edges: false``: None).
        costs: cumulative wall seconds: ``{"simulate": s, "inference": s, "tuning": s}`` and the event count.
        now: virtual time (ns) at which the decision is asked: the end of the latest iteration the controller has
            seen, of any job (0 before the first). Lets a policy coordinate the jobs in virtual time.
        start: virtual time (ns) the job started (0 without a scheduler section; a job of a stream starts when the
            scheduler places it, with no history: its first iterations must be simulated).
        running: ids of the jobs running now, in start order (a stream's arrivals and departures show here; without
            a scheduler every job of the run, which all start at 0).
        change_error: the job's model's own expected error (%) at a co-runner change, before any truth of the new
            mix: 68 % of its predictions there fell within it (``Surrogate.change_error``); None: it declares none.
    """

    job: str
    job_id: int
    iteration: int
    n_iterations: int | None
    mode: Mode | None
    modes: Sequence[Mode]
    truth: Sequence[float | None]
    predicted: Sequence[float | None]
    errors: Sequence[tuple[int, float]]
    costs: dict = field(default_factory=dict)
    now: float = 0.0
    start: float = 0.0
    running: tuple[int, ...] = ()
    signed_errors: Sequence[tuple[int, float]] = ()
    clean_signed_errors: Sequence[tuple[int, float]] | None = None
    change_error: float | None = None

    def run_length(self, mode: Mode) -> int:
        """How many iterations in a row, ending with the previous one, ran in ``mode``."""
        n = 0
        for m in reversed(self.modes):
            if m != mode:
                break
            n += 1
        return n


class Policy(abc.ABC):
    """Subclass, set ``name``, implement :meth:`decide`. Constructor keyword arguments come from the scenario's
    ``controller.params``."""

    name: ClassVar[str] = "policy"
    #: whether a dry run -- every iteration of a nominal length, no errors measured, no costs -- gives the schedule the
    #: policy follows in a run: CODES' director fixes its windows from such a plan before CODES starts
    #: (codes_bridge.hybrid.policy_plan), so a policy whose schedule follows what the run measures cannot drive it
    plans_ahead: ClassVar[bool] = True

    @abc.abstractmethod
    def decide(self, view: JobView) -> Mode | str:
        """Mode for ``view.iteration`` of ``view.job``."""

    def ahead(self) -> "Policy | None":
        """The form of this policy for a backend that fixes every decision before the run (CODES' director,
        ``codes_bridge.hybrid.policy_plan``): a policy whose decisions a dry run -- every iteration of a nominal
        length, no errors measured, no costs -- gives in advance, and which keeps this policy's promise as far as
        a plan made before the run can. Default: the policy itself when :attr:`plans_ahead`, else None (no such
        form: such a backend refuses it). A policy that adapts to what the run measures overrides this with its
        fixed-schedule form (``confident``: :class:`controllers.ahead.ConfidentAhead`)."""
        return self if self.plans_ahead else None

    def why_simulated(self, job: str, n_iterations: int | None) -> str | None:
        """One line on why this policy never predicts job ``job`` of ``n_iterations`` whatever the run measures, for
        a backend to say why a run it planned ahead is the truth (None: no such reason; the default)."""
        return None

    def horizon(self, view: JobView) -> tuple[int, float]:
        """Asked right after :meth:`decide` answered PREDICT for ``view``: ``(n, until)``, a promise that
        :meth:`decide` would answer PREDICT for this job's next ``n`` iterations at every one of their boundaries
        that comes before virtual time ``until`` -- whatever the other jobs' boundaries that are not decided
        meanwhile do -- and that those calls would change nothing but what :meth:`fast_forwarded` then applies.
        The hybrid controller then fast-forwards the job through them without a call per iteration; any other
        decision, a job's start or end, or a job finishing its iterations ends the stretch at the job's next
        boundary (the promise only has to hold until then). Must not change the policy's state. Default ``(0, -inf)``:
        no promise, every iteration is decided on its own."""
        return 0, -math.inf

    def standing(self, job_id: int, until: float) -> float:
        """After a decision for another job: the part of a :meth:`horizon` promise given to ``job_id`` with ``until``
        that still stands, as a new ``until`` (-inf: none; never more than ``until``). Default -inf: every other
        decision ends every promise."""
        return -math.inf

    def fast_forwarded(self, job_id: int, n_iterations: int | None, iterations, nows) -> None:
        """The calls of :meth:`decide` that a :meth:`horizon` made unnecessary: job ``job_id`` (``n_iterations``)
        reached each iteration of ``iterations`` at virtual time ``nows[k]`` (``JobView.now`` of that call), and its
        answer was PREDICT. Bring the policy's state to what those calls would have left. Default: nothing (a
        policy that keeps no state per call)."""


def ahead_form(policy) -> "Policy | None":
    """:meth:`Policy.ahead` of ``policy``, for a duck-typed one too (no ``ahead``: itself unless it says
    ``plans_ahead = False``)."""
    ahead = getattr(policy, "ahead", None)
    if callable(ahead):
        return ahead()
    return policy if getattr(policy, "plans_ahead", True) else None
