"""SIGTERM and SIGHUP end a command like Ctrl-C does.

``timeout``, Slurm, ``docker stop`` and a closed terminal send SIGTERM or SIGHUP; by default they kill Python on the
spot, leaving a run's manifest ``running``. :func:`terminate_like_ctrl_c` turns them into :class:`Terminated` (a
``KeyboardInterrupt``, so it passes every ``except Exception`` on its way up), which the run's failure handler
records as ``terminated (SIGTERM)``; :func:`hybridsim.cli.main` then exits with 128 + the signal number.
"""

from __future__ import annotations

import contextlib
import signal
import threading

#: the signals turned into :class:`Terminated`
SIGNALS = tuple(getattr(signal, n) for n in ("SIGTERM", "SIGHUP") if hasattr(signal, n))


class Terminated(KeyboardInterrupt):
    """The process received ``signum`` (SIGTERM, SIGHUP)."""

    def __init__(self, signum: int):
        self.signum = int(signum)
        super().__init__(f"terminated ({signal.Signals(signum).name})")

    @property
    def exit_status(self) -> int:
        return 128 + self.signum


def _raise_terminated(signum, _frame):
    # once: a second signal while the first unwinds must not interrupt the failure handler
    for s in SIGNALS:
        signal.signal(s, lambda *_: None)
    raise Terminated(signum)


@contextlib.contextmanager
def terminate_like_ctrl_c():
    """Within the block, SIGTERM and SIGHUP raise :class:`Terminated` in the main thread (no-op elsewhere); the
    previous handlers come back afterwards."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: signal.signal(s, _raise_terminated) for s in SIGNALS}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def failure_reason(exc: BaseException) -> str:
    """The manifest's ``reason`` for an exception that ended a run; never raises."""
    if isinstance(exc, Terminated):
        return str(exc)
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted (Ctrl-C)"
    try:
        return f"{type(exc).__name__}: {exc}"
    except BaseException:
        return type(exc).__name__
