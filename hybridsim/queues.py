"""Queue policies of the batch scheduler (:class:`hybridsim.scheduler.Scheduler`): in which order waiting jobs are
served and how jobs behind the head may jump ahead.

A policy is a small class: :attr:`QueuePolicy.backfill` (``none``, ``easy`` or ``conservative``) and
:meth:`QueuePolicy.key`, a priority fixed when the job arrives (smaller first; ties by arrival, then submission).
The scheduler starts jobs from the head of that order while they fit, then backfills as the policy says. A policy
sees a narrow view of a job -- ``size``, ``walltime``, ``arrival``, ``job_id`` -- never the scheduler's state.

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

from typing import ClassVar

import hybridsim_common.plugins as plugins

ENTRY_POINT_GROUP = "hybridsim.queues"
BACKFILL_MODES = ("none", "easy", "conservative")


class QueuePolicyError(ValueError):
    """An unknown or broken queue policy."""


class QueuePolicy:
    """Base class of queue policies. Subclasses set :attr:`name` and :attr:`backfill` and may override :meth:`key`.

    ``key(job)`` must depend only on the job (it is computed once, when the job arrives)."""

    name: ClassVar[str] = "fcfs"
    backfill: ClassVar[str] = "none"

    def key(self, job) -> tuple:
        """Priority of ``job`` (fields ``size``, ``walltime``, ``arrival``, ``job_id``): smaller is served first;
        the default ``()`` keeps arrival order."""
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
