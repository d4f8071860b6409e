"""The full reference data (recorded CODES runs, the NASA trace) for the benchmarks that compare with CODES.

Read from ``HYBRIDSIM_REFERENCE_DATA``, a folder with ``codes/`` and ``traces/`` (docs/reference-data.md). The paths
are built at import, with a placeholder when the variable is not set, so the scripts can be imported (and their
scenarios listed) without the data; :func:`require` at the start of a run stops with a message naming the variable.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ENV = "HYBRIDSIM_REFERENCE_DATA"
_value = os.environ.get(ENV, "").strip()
#: the reference data folder (a placeholder path while the variable is unset)
DATA = Path(_value).expanduser() if _value else Path(f"${ENV}")
#: the recorded CODES runs
CODES = DATA / "codes"
#: the job traces
TRACES = DATA / "traces"


def require() -> Path:
    """The reference data folder; exits with status 2 and the reason on stderr when the variable is unset or names
    no such folder."""
    if not _value:
        problem = (f"{ENV} is not set: point it at the reference data folder (codes/, traces/), e.g. "
                   f"{ENV}=/path/to/data python benchmarks/{Path(sys.argv[0]).name} (docs/reference-data.md)")
    elif not CODES.is_dir():
        problem = f"{ENV}={_value}: no codes/ folder there (expected the reference data: codes/, traces/)"
    else:
        return DATA
    print(problem, file=sys.stderr)
    raise SystemExit(2)
