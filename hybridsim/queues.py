"""Queue policies of the batch scheduler (:class:`hybridsim.scheduler.Scheduler`): in which order waiting jobs are
served and how jobs behind the head may jump ahead.

A policy is a small class: :attr:`QueuePolicy.backfill` (``none``, ``easy`` or ``conservative``) and
:meth:`QueuePolicy.key`, a priority fixed when the job arrives (smaller first; ties by arrival, then submission).
The scheduler starts jobs from the head of that order while they fit, then backfills as the policy says. A policy
sees a narrow view of a job (:class:`JobView`), never the scheduler's state: ``size``, ``walltime``, ``arrival``,
``job_id``, and -- where the input has them (SWF fields 12, 13, 15, 16) -- ``user``, ``group``, ``queue`` and
``partition`` (-1 when unknown), plus ``usage``, the :class:`UsageHistory` of the jobs that ended so far (node-time
per user and per group, optionally decayed with a half-life). A policy written for the first four fields works
unchanged. Priorities are fixed when a job arrives: fair-share (:class:`FairShare`) orders by the user's usage at
that moment.

Built-in: ``fcfs`` (arrival order, no backfilling), ``easy`` (EASY backfilling) and ``conservative`` (conservative
backfilling). More come from the ``hybridsim.queues`` entry-point group of installed packages, e.g. in a
``pyproject.toml``::

    [project.entry-points."hybridsim.queues"]
    sjf = "hybridsim.queues:ShortestJobFirst"

(hybridsim itself registers :class:`ShortestJobFirst` that way, as the example), or from an explicit
``module:Class`` that the user names (``--queue mypkg.queues:Fair``). Nothing is imported from the working
directory or a scenario's folder.
"""

from __future__ import annotations

import math
from typing import ClassVar, Protocol

import hybridsim_common.plugins as plugins

ENTRY_POINT_GROUP = "hybridsim.queues"
BACKFILL_MODES = ("none", "easy", "conservative")


class QueuePolicyError(ValueError):
    """An unknown or broken queue policy."""


class UsageHistory:
    """Node-time (nodes x time, in the driver's unit) used per user and per group by the jobs that ended, each
    charge decayed by ``2 ** (-age / half_life)`` (``inf``: no decay) -- the usage a fair-share priority reads."""

    def __init__(self, half_life: float = math.inf):
        if not half_life > 0:
            raise QueuePolicyError(f"usage half-life must be > 0, got {half_life}")
        self.half_life = float(half_life)
        self._users: dict[int, tuple[float, float]] = {}   # id -> (value, at)
        self._groups: dict[int, tuple[float, float]] = {}

    def _decayed(self, entry: tuple[float, float] | None, now: float) -> float:
        if entry is None:
            return 0.0
        v, at = entry
        return v if math.isinf(self.half_life) else v * 2.0 ** (-(now - at) / self.half_life)

    def charge(self, user: int, group: int, amount: float, now: float) -> None:
        """Add ``amount`` of node-time used by a job of ``user`` and ``group`` that ended at ``now``."""
        for table, k in ((self._users, user), (self._groups, group)):
            table[k] = (self._decayed(table.get(k), now) + amount, now)

    def user(self, user: int, now: float) -> float:
        """The (decayed) node-time ``user`` has used by ``now``."""
        return self._decayed(self._users.get(user), now)

    def group(self, group: int, now: float) -> float:
        """The (decayed) node-time ``group`` has used by ``now``."""
        return self._decayed(self._groups.get(group), now)


class JobView(Protocol):
    """What :meth:`QueuePolicy.key` sees of a job (read-only)."""

    job_id: object
    size: int
    walltime: float
    arrival: float
    user: int
    group: int
    queue: int
    partition: int
    usage: UsageHistory


class QueuePolicy:
    """Base class of queue policies. Subclasses set :attr:`name` and :attr:`backfill` and may override :meth:`key`.

    ``key(job)`` must depend only on the job (it is computed once, when the job arrives)."""

    name: ClassVar[str] = "fcfs"
    backfill: ClassVar[str] = "none"

    #: half-life of the usage history the scheduler keeps for this policy (the driver's time unit; inf: no decay)
    half_life: ClassVar[float] = math.inf

    def key(self, job: JobView) -> tuple:
        """Priority of ``job`` (a :class:`JobView`): smaller is served first; the default ``()`` keeps arrival
        order."""
        return ()


class FirstComeFirstServed(QueuePolicy):
    """Strict arrival order: the first job that does not fit blocks every later one."""

    name, backfill = "fcfs", "none"


class EasyBackfilling(QueuePolicy):
    """Arrival order; EASY backfilling (Lifka 1995): only the head holds a reservation."""

    name, backfill = "easy", "easy"


class ConservativeBackfilling(QueuePolicy):
    """Arrival order; conservative backfilling (Mu'alem & Feitelson 2001): every waiting job holds a reservation
    that no later job may delay."""

    name, backfill = "conservative", "conservative"


class ShortestJobFirst(QueuePolicy):
    """The example plug-in (entry point ``sjf``): shortest walltime first (ties: arrival order), no backfilling. A
    long job can starve while shorter ones keep arriving -- the textbook trade-off against FCFS."""

    name, backfill = "sjf", "none"

    def key(self, job) -> tuple:
        return (job.walltime,)


class FairShare(QueuePolicy):
    """Fair-share (entry point ``fairshare``): the job of the user who has used the least node-time so far (the
    jobs that ended before it arrived, :class:`UsageHistory`) first; ties: its group's usage, then arrival order.
    EASY backfilling. Subclass and set :attr:`half_life` to forget old usage."""

    name, backfill = "fairshare", "easy"

    def key(self, job: JobView) -> tuple:
        return (job.usage.user(job.user, job.arrival), job.usage.group(job.group, job.arrival))


BUILTIN: dict[str, type[QueuePolicy]] = {c.name: c for c in (FirstComeFirstServed, EasyBackfilling,
                                                             ConservativeBackfilling)}


#: the queue policies' registry (:class:`hybridsim_common.plugins.Registry`: built-in, entry points, module:Class)
QUEUES = plugins.Registry(ENTRY_POINT_GROUP, "queue policy", BUILTIN, base=QueuePolicy)


def available_queue_policies() -> list[str]:
    """Built-in names first, then the installed entry points."""
    return QUEUES.names()


def queue_policy(spec: "str | QueuePolicy | type[QueuePolicy]") -> QueuePolicy:
    """The policy named ``spec``: built-in, ``hybridsim.queues`` entry point, or ``module:Class`` (imported as
    installed); a :class:`QueuePolicy` instance or subclass passes through."""
    if isinstance(spec, QueuePolicy):
        cls = type(spec)
        obj = spec
    else:
        if isinstance(spec, type):
            cls = spec
        elif not isinstance(spec, str):
            raise QueuePolicyError(f"queue policy must be a name, got {spec!r}")
        else:
            try:
                cls = QUEUES.load(spec)
            except (ValueError, ImportError) as exc:  # unknown (did you mean), unimportable, not a QueuePolicy
                raise QueuePolicyError(str(exc)) from None
        if not (isinstance(cls, type) and issubclass(cls, QueuePolicy)):
            raise QueuePolicyError(f"queue policy {spec!r} is not a hybridsim.queues.QueuePolicy subclass")
        try:
            obj = cls()
        except Exception as exc:
            raise QueuePolicyError(f"queue policy {spec!r}: {type(exc).__name__}: {exc}") from None
    if obj.backfill not in BACKFILL_MODES:
        raise QueuePolicyError(f"queue policy {cls.__name__}: backfill {obj.backfill!r} not in "
                               f"{', '.join(BACKFILL_MODES)}")
    return obj
