"""codes_bridge: CODES/ROSS as a hybridsim backend.

* :mod:`codes_bridge.parsers` -- streaming parsers of CODES outputs into :mod:`hybridsim_common.records`
* :mod:`codes_bridge.importer` -- :func:`read_codes_run` (a CODES run directory -> :class:`CodesRun`) and
  :func:`import_codes_run` (-> a hybridsim run directory)
* :mod:`codes_bridge.conf` -- CODES ``.conf`` / workload-list parsing
* :mod:`codes_bridge.scenario_from_codes` -- the equivalent hybridsim scenario of a CODES run

A plug-in of hybridsim, which names none of it: :class:`codes_bridge.backend.CodesBackend` is the ``codes`` entry
point of the ``hybridsim.backends`` group and :func:`codes_bridge.cli.register` the ``codes`` entry point of
``hybridsim.commands`` (pyproject.toml).
"""

from __future__ import annotations

__all__ = ["read_codes_run", "import_codes_run", "CodesRun"]


def __getattr__(name):  # lazy: importing codes_bridge stays cheap
    if name in __all__:
        from . import importer

        return getattr(importer, name)
    raise AttributeError(f"module 'codes_bridge' has no attribute {name!r}")
