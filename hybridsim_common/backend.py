"""The Backend interface: what the controller loop (``hybridsim.runner``) sees of a simulator.

:class:`Backend` is implemented by the embedded engine (:class:`hybridsim.engine.Engine`), the remote engine
(:class:`hybridsim.service.remote.RemoteBackend`) and CODES (:class:`codes_bridge.backend.CodesBackend`); each
declares what it can do (``no_director``, ``runs_policy``, ``streams_samples``, ``reports_job_end``,
``no_streams``), so the runner
has one path.

A backend simulates a scenario and reports, as the simulation runs, :class:`~hybridsim_common.records.IterationRecord`\\ s
and :class:`~hybridsim_common.records.PortSamples` blocks. The embedded engine also takes a :class:`Director` that decides,
per job and iteration, whether the job is simulated packet by packet (``SIMULATE``) or advanced by predicted
iteration times (``PREDICT``). Backends know nothing of surrogates; the director knows nothing of packets.

Switching protocol (docs/design.md §3):

* ``director.mode_for(job_id, iteration)`` is called once per (job, iteration), when the first rank of the job is
  ready to start that iteration. The answer holds for every rank of the job for that iteration.
* For a ``PREDICT`` iteration the engine parks the job's ranks as they become ready; when all ranks of the job are
  ready it calls ``director.predict(job_id, iteration, ranks, starts)`` once and ends rank ``r``'s iteration at
  ``starts[r] + durations[r]``, injecting no packets. Records of predicted iterations are emitted with
  ``simulated=False``.
* Records reach the run's ``on_record(record, simulated)`` in event order; a backend that makes them in bursts may
  hand a burst to :meth:`Director.on_records` in one call when ``on_record`` is the director's own
  (:func:`records_sink`); by default that is ``on_record`` on each.
* Fast-forward (optional): right after ``predict`` a backend may ask ``director.fast_forward(job_id, iteration,
  ends)`` for the durations of the job's next iterations that the director already knows to be PREDICT; it then
  advances the job through them without a call per iteration and tells the director how far it got
  (``fast_forwarded``) before any other director call, ending the stretch at the job's next boundary when another
  decision, a job start or end, or a job's last iteration completing could change what the director would say.
  The records, events and the director's state are those of the per-iteration protocol.
* Job streams (a scenario with a ``scheduler`` section): ``director.on_job_start(job_id, t, terminals)`` is called
  when the scheduler starts a job (before its first ``mode_for``) and ``director.on_job_end(job_id, t)`` when its
  last rank finishes; a job exists for the director only in between. Scenarios without a scheduler call neither.
* ``director.keep_background`` (bool or ``"profile"``): while a job is predicted, keep its last simulated
  iteration's measured per-link utilisation as background load on the links it used (their capacity is reduced
  accordingly for the simulated jobs): ``True`` its mean over the iteration, ``"profile"`` phase by phase, replayed
  over each predicted iteration at the predicted pace (the embedded engine; a remote engine takes it as ``True``).
"""

from __future__ import annotations

import abc
import enum
from dataclasses import dataclass, field
from typing import Callable, ClassVar, Sequence

import numpy as np

from .records import IterationRecord, PortSamples


class Mode(str, enum.Enum):
    SIMULATE = "simulate"
    PREDICT = "predict"


class Director(abc.ABC):
    """Decides, per job and iteration, SIMULATE or PREDICT (see the module docstring). Subclass it; directors that
    only duck-type ``keep_background``/``mode_for``/``predict`` are accepted by the engine too."""

    #: while a job is predicted, keep its last measured link load as background (see the module docstring)
    keep_background: bool | str = False
    #: whether the backend should stream port samples to the run's ``on_samples`` (graph surrogates need them)
    wants_samples: bool = False
    #: why this director predicts nothing and runs the truth (a default that cannot pay for its loop), said once
    #: when the run starts; None: it runs its policy
    truth_reason: str | None = None

    @abc.abstractmethod
    def mode_for(self, job_id: int, iteration: int) -> Mode: ...

    @abc.abstractmethod
    def predict(self, job_id: int, iteration: int, ranks: np.ndarray, starts: np.ndarray) -> np.ndarray:
        """Predicted durations (ns, float64, one per rank in ``ranks``) of ``iteration``."""

    def fast_forward(self, job_id: int, iteration: int, ends: np.ndarray) -> np.ndarray | None:
        """Asked by a backend that can fast-forward, right after :meth:`predict` of ``iteration``, whose ranks end
        at ``ends`` (one per rank, local order): the durations (ns, float64, (h, ranks)) of the job's next ``h``
        iterations, each rank starting one where it ended the previous, when the director knows already that they
        are PREDICT and what it would predict for them; None (the default) or h = 0: no stretch. The backend then
        advances the job through them with no :meth:`mode_for` or :meth:`predict` call, and reports how far it got
        with :meth:`fast_forwarded` before every other director call; after any other :meth:`mode_for` it keeps
        what :meth:`fast_forward_kept` says, and it ends the stretch at the job's next boundary on a job's start or
        end or a job completing its last iteration (what changes every job's co-runners), so a stretch only has to
        be right until then."""
        return None

    def fast_forward_kept(self, job_id: int, reached: int) -> int:
        """After a :meth:`mode_for` for another job: how many iterations of job ``job_id``'s open stretch still stand
        (at least ``reached``, the ones a rank has reached; the backend ends the stretch there). Default
        ``reached``."""
        return reached

    def fast_forwarded(self, job_id: int, decided: int, predicted: int, length: int) -> None:
        """The first ``decided`` iterations of the job's latest :meth:`fast_forward` stretch have been reached (the
        :meth:`mode_for` calls they replace would have been made) and the first ``predicted`` of them ended on their
        given durations (their :meth:`predict` calls), counted from the stretch's start, which now has ``length``
        iterations (fewer than granted where the backend ended it early); called again as these change, the last
        time with ``predicted == length``. Default: nothing."""

    def on_record(self, record: IterationRecord, simulated: bool) -> None:
        """One iteration record (what a backend hands the run's ``on_record`` callback; the runner passes this
        method). Default: nothing."""

    def on_records(self, records: Sequence[IterationRecord], simulated: bool, spans: list | None = None) -> None:
        """Several records at once, in event order, all ``simulated`` or all not: the same as :meth:`on_record` on
        each in turn (the default). ``records`` is a sequence (the native core's is a
        :class:`~hybridsim_common.records.RecordBlock`, whose records are made as they are read). A backend that makes records in bursts (the embedded engine's native core hands
        over predicted iterations that way) calls it once per burst when the run's ``on_record`` is this director's
        own (:func:`records_sink`), so a director can take the burst in one call instead of one per record. The
        embedded engine also hands over its simulated records so (a
        :class:`~hybridsim_common.records.RecordRows`), those since the director's latest call, before its next one
        (:func:`takes_bursts`): what the director sees at each call is what one call per record gives.
        ``spans`` (or None): the burst summed up per (job, iteration), in order of first appearance, as tuples
        ``(job_id, iteration, records, earliest start, latest end)``, for a director whose bookkeeping needs no more
        than that (the native core makes it while it makes the records: for performance)."""
        on_record = self.on_record
        for rec in records:
            on_record(rec, simulated)

    def on_job_start(self, job_id: int, t: float, terminals: np.ndarray) -> None:
        """A job of a stream starts at ``t`` on ``terminals`` (rank r on ``terminals[r]``); default: nothing. Only
        job streams call it (a duck-typed director must define it to run one)."""

    def on_job_end(self, job_id: int, t: float) -> None:
        """A job of a stream ended at ``t``; its terminals are free. Default: nothing."""


class AlwaysSimulate(Director):
    """The director of a pure simulation."""

    def mode_for(self, job_id: int, iteration: int) -> Mode:
        return Mode.SIMULATE

    def predict(self, job_id, iteration, ranks, starts):  # pragma: no cover - never called
        raise RuntimeError("AlwaysSimulate never predicts")


#: ``on_record(record, simulated)``; ``on_samples(block)`` with one or more sampling windows.
RecordCallback = Callable[[IterationRecord, bool], None]
SamplesCallback = Callable[[PortSamples], None]


def takes_bursts(director, on_record: RecordCallback | None) -> bool:
    """Whether a run's ``on_record`` is the director's own and the director a :class:`Director`: it then takes
    records in bursts (:meth:`Director.on_records`), simulated ones too, in one call before its next other call."""
    return (on_record is not None and isinstance(director, Director)
            and getattr(on_record, "__self__", None) is director)


def records_sink(director, on_record: RecordCallback | None) -> Callable[..., None] | None:
    """The batch form ``(records, simulated, spans=None)`` of a run's ``on_record`` callback, for a backend that makes records in
    bursts: the director's :meth:`Director.on_records` when ``on_record`` is the director's own ``on_record`` and
    the director is a :class:`Director` (a duck-typed one declares no ``on_records``), else ``on_record`` called on
    each record in turn; None without a callback."""
    if on_record is None:
        return None
    if takes_bursts(director, on_record):
        return director.on_records

    def each(records: list[IterationRecord], simulated: bool, spans=None) -> None:
        for rec in records:
            on_record(rec, simulated)

    return each


@dataclass
class SimulationResult:
    """What a finished (or stopped) backend run returns."""

    #: the records in event order: a sequence of :class:`IterationRecord` (the embedded engine's are
    #: :class:`~hybridsim_common.records.IterationColumns`, columns read as records only one by one) and whether each
    #: was simulated (a sequence of bools of the same length)
    records: Sequence[IterationRecord]
    simulated: Sequence[bool]
    ports: PortSamples | None
    events: int
    end_time: float
    job_end: dict[str, float]
    wall_s: float
    partial: bool = False
    link_totals: dict | None = None
    stats: dict = field(default_factory=dict)
    #: job streams: start time and allocated terminals per job name (jobs that started)
    job_start: dict[str, float] = field(default_factory=dict)
    job_terminals: dict[str, np.ndarray] = field(default_factory=dict)
    #: job streams with ``scheduler.kill_at_walltime``: the jobs killed at their walltime (``job_end`` is the kill)
    job_killed: list[str] = field(default_factory=list)
    #: what stood in for the network traffic of predicted jobs while they were predicted (a hybrid run that
    #: predicted something): ``{"mode": ..., "scale": ...}`` as the backend ran it (CODES: ``backend.codes.standin``
    #: and ``standin_scale``), recorded in the run's ``summary.json`` and manifest; None when nothing stood in
    #: for anything (a pure run, or a backend that does not say)
    standin: dict | None = None


class Backend(abc.ABC):
    """A simulator the controller loop drives: :meth:`run` simulates the whole scenario once."""

    #: why :meth:`run` cannot take a director (hybrid mode), or None when it can
    no_director: ClassVar[str | None] = None
    #: whether the backend applies the scenario's ``controller`` and ``surrogate`` sections itself in hybrid mode
    #: (CODES' own director); the runner then builds no controller and passes ``mode`` to its constructor. Such a
    #: backend also runs ``mode="floor"``: its hybrid machinery with nothing predicted, so that what the machinery
    #: alone does to the simulation (the perturbation floor) can be measured (``hybridsim bench``)
    runs_policy: ClassVar[bool] = False
    #: whether :meth:`run` hands port samples to ``on_samples`` while it runs (graph surrogates need them)
    streams_samples: ClassVar[bool] = True
    #: whether ``SimulationResult.job_end`` holds completion times the simulator itself reports (CODES prints
    #: them, also for jobs without iteration marks); otherwise a job completes with its last iteration
    reports_job_end: ClassVar[bool] = False
    #: why :meth:`run` cannot run a job stream (a ``scheduler`` section: jobs that start and end mid-run), or None
    no_streams: ClassVar[str | None] = None
    #: the pydantic model of the options ``backend.<kind>`` takes (None: none); the scenario schema validates the
    #: section against it, with errors located at the key (a plug-in owns its options, the schema names none)
    options: ClassVar[type | None] = None
    #: the keys of :attr:`options` only hybrid runs read (a pure run is the same whatever they say)
    hybrid_only_options: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def scenario_problems(cls, scenario) -> list[tuple[tuple, str]]:
        """(field path, message) for what this backend cannot run in ``scenario``: ``validate`` and ``run`` refuse it,
        located at the path, before anything is built. Default: nothing."""
        return []

    @classmethod
    def run_refusal(cls, scenario) -> str | None:
        """Why ``scenario`` cannot run on this backend in any mode (None: it can); ``validate`` and ``run`` refuse it
        before any run directory exists. Default: :attr:`no_streams` for a job stream."""
        return cls.no_streams if scenario.is_stream else None

    @classmethod
    def hybrid_refusal(cls, scenario) -> str | None:
        """Why ``scenario`` cannot run in hybrid mode on this backend (None: it can); ``hybridsim run --mode hybrid``
        refuses it before any run directory exists and ``validate`` prints it. Default: :attr:`no_director`."""
        return cls.no_director

    @classmethod
    def never_predicted(cls, scenario) -> dict[str, str]:
        """The jobs of ``scenario`` this backend can never predict, each with the reason: in hybrid mode they stay
        simulated whatever the policy says, and plans and summaries never count them as predicted. Default: none."""
        return {}

    @abc.abstractmethod
    def run(self, director: Director | None = None, on_record: RecordCallback | None = None,
            on_samples: SamplesCallback | None = None) -> SimulationResult: ...
