"""The event loop: a heap of ``(time, seq, handler, a, b)`` entries, nothing else.

Like simpy's core, the loop knows no model: it pops the earliest entry and calls ``handler(time, a, b)``. Ties in time
are broken by the insertion counter ``seq``, so a run is a deterministic function of its inputs. Model objects
(:mod:`.network`, :mod:`.mpi`) push entries with :meth:`EventLoop.at` (or, in hot paths, straight onto ``heap`` with
the loop's counter) and keep their own state in small slotted objects.

Stopping: a handler may call :meth:`EventLoop.stop`; :meth:`run` also stops at ``until`` (virtual ns) and after
``max_events`` events, leaving the remaining entries in the heap. A run stopped from outside (its wall-clock deadline
passed, its client went away) is a :class:`RunStop`: whoever starts a run makes one and makes it :meth:`active
<RunStop.active>` on its thread; the engine :meth:`checks <RunStop.check>` it between steps, from building the
workloads to the last event.
"""

from __future__ import annotations

import contextlib
import contextvars
import itertools
import math
import time
from heapq import heappop, heappush
from typing import Callable


class LimitExceeded(RuntimeError):
    """A run went past one of its scenario's ``limits`` (deadline, samples, packets per message); the message
    starts with the limit's name."""


class EngineError(RuntimeError):
    """The scenario cannot be simulated as given (inconsistent workload, no way to end, a core not available...)."""


class RunStop:
    """Why the run on this thread must end now: its wall-clock ``deadline`` (seconds from ``start``, a
    ``time.perf_counter()`` value, default now) passed, or :meth:`cancel` was called (from any thread). ``deadline``
    None: only cancelling stops it. :meth:`check` raises; it is cheap (one clock read), so loops call it often."""

    def __init__(self, deadline: float | None = None, start: float | None = None):
        self.deadline = deadline
        self.start = time.perf_counter() if start is None else float(start)
        self._cancel: BaseException | None = None

    def cancel(self, exc: BaseException) -> None:
        """Make the next :meth:`check` raise ``exc`` (thread-safe: one reference assignment)."""
        self._cancel = exc

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def check(self, where: str = "") -> None:
        """Raise the cancelling exception, or :class:`LimitExceeded` once the deadline has passed (``where``: what
        the run was doing, for the message)."""
        if self._cancel is not None:
            raise self._cancel
        if self.deadline is not None and time.perf_counter() - self.start > self.deadline:
            raise LimitExceeded(f"deadline: the run passed its wall-clock deadline of {self.deadline:g} s "
                                f"(limits.deadline){' ' + where if where else ''}")

    @contextlib.contextmanager
    def active(self):
        """Within the block, :func:`current_stop` on this thread (and its context) is this one."""
        token = _CURRENT.set(self)
        try:
            yield self
        finally:
            _CURRENT.reset(token)


_CURRENT: contextvars.ContextVar[RunStop | None] = contextvars.ContextVar("hybridsim_run_stop", default=None)


def current_stop() -> RunStop | None:
    """The :class:`RunStop` of the run in progress on this thread, if its starter made one active."""
    return _CURRENT.get()


#: integers from here on are not exact doubles: an event time that is such an integer is refused (both cores)
EXACT_INT = 2 ** 53


def _bad_time(t) -> str:
    """The message of a refused event time (the native core's, word for word)."""
    if isinstance(t, int) and t >= EXACT_INT:
        return f"event time must be below 2**53 ns when an integer (beyond, it is not an exact double), got {t!r}"
    return f"event time must be a number >= 0 ns, got {t!r}"


class EventLoop:
    """A deterministic discrete-event loop over virtual nanoseconds."""

    __slots__ = ("heap", "seq", "now", "events", "_stopped", "leftover")

    def __init__(self) -> None:
        self.heap: list = []
        self.seq = itertools.count()
        self.now = 0.0
        self.events = 0
        self._stopped = False
        #: the entries still pending when a handler called :meth:`stop`
        self.leftover: list = []

    @property
    def pending(self) -> int:
        """Entries still in the heap."""
        return len(self.heap)

    def at(self, t: float, handler: Callable, a=None, b=None) -> None:
        """Call ``handler(t, a, b)`` at virtual time ``t`` (ns): a number >= 0 (NaN refused), an integer below 2**53
        (beyond, it is not an exact double and the two cores would order it differently). The native core's ``at``
        refuses the same times with the same :class:`ValueError`."""
        if not t >= 0 or (t >= EXACT_INT and type(t) is not float):
            raise ValueError(_bad_time(t))
        heappush(self.heap, (t, next(self.seq), handler, a, b))

    def stop(self) -> None:
        """End :meth:`run` after the current handler returns (pending entries move to ``leftover``)."""
        self._stopped = True
        self.leftover = list(self.heap)
        self.heap.clear()

    def run(self, until: float = math.inf, max_events: int | None = None,
            on_check: Callable[[float, int], None] | None = None, check_every: int = 65536) -> bool:
        """Process events in time order. Returns ``True`` if stopped early by ``until`` or ``max_events`` (a partial
        run), ``False`` if the heap ran dry or a handler called :meth:`stop`. ``on_check(now, events)`` is called
        every ``check_every`` events (progress bars, invariant checks)."""
        heap = self.heap
        pop = heappop
        n = self.events
        limit = max_events if max_events is not None else math.inf
        next_check = min(n + check_every, limit)
        partial = False
        t = self.now
        while heap:
            entry = pop(heap)
            t = entry[0]
            if t > until:
                heappush(heap, entry)
                t = until
                partial = True
                break
            entry[2](t, entry[3], entry[4])
            n += 1
            if n >= next_check:
                self.now, self.events = t, n
                if on_check is not None:
                    on_check(t, n)
                if n >= limit:
                    partial = bool(heap)
                    break
                next_check = min(n + check_every, limit)
        self.now, self.events = t, n
        return partial and not self._stopped
