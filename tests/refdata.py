"""Where the tests find recorded CODES output and the SWF trace. The only reader of ``HYBRIDSIM_REFERENCE_DATA``.

Two sources, laid out alike (``codes/<run>/<variant>/...``, ``traces/``):

* ``tests/data/`` (in the repository): the files of the reference CODES runs that the parsers, importer and writers
  read -- runs A and B and C's network-surrogate and failed variants whole, the inputs and small outputs of the long
  runs C, E and F, the 72-node op trace -- and the NASA iPSC/860 trace gzipped. Every test that is not marked
  ``reference_data`` reads only these (``CODES``, ``swf_trace`` fixture), so a clone with nothing beside it runs it.
  ``tests/data/bundle.py`` rebuilds the folder from the full data; ``tests/test_refdata.py`` checks it is a byte copy.
* ``HYBRIDSIM_REFERENCE_DATA`` (not in the repository): the full reference data, the same layout with every file
  (about 100 MB: the VT sample tables of the long runs, the 1,056-node op trace). Tests marked
  ``@pytest.mark.reference_data`` read it (``REFERENCE_CODES``) and are skipped, each by name, when it is not set;
  a value that is set but is no such folder stops the session (conftest.py), so CI cannot skip them by accident.

Run them with ``HYBRIDSIM_REFERENCE_DATA=/path/to/data python -m pytest -q -rs -m reference_data tests``.
"""

from __future__ import annotations

import os
from pathlib import Path

ENV = "HYBRIDSIM_REFERENCE_DATA"
DATA = Path(__file__).resolve().parent / "data"
#: the bundled subset of the reference CODES runs (same layout as ``$HYBRIDSIM_REFERENCE_DATA/codes``)
CODES = DATA / "codes"
TRACE_NAME = "NASA-iPSC-1993-3.1-cln.swf"
#: the NASA Ames iPSC/860 1993 trace (Parallel Workloads Archive, cleaned version 3.1), gzipped
TRACE_GZ = DATA / "traces" / (TRACE_NAME + ".gz")

_value = os.environ.get(ENV, "").strip()
#: the full reference data folder, or None when the variable is not set
REFERENCE: Path | None = Path(_value).expanduser().resolve() if _value else None
#: the full reference CODES runs; only tests marked ``reference_data`` may use it (they are skipped when it is unset)
REFERENCE_CODES = (REFERENCE if REFERENCE is not None else Path(f"<{ENV} is not set>")) / "codes"

SKIP_HINT = f"needs the full reference CODES runs: set {ENV} to the reference data folder (README, Development)"


def problem() -> str | None:
    """Why the variable, when set, does not name a usable reference folder (None when it does or is unset)."""
    if REFERENCE is None:
        return None
    if not (REFERENCE / "codes").is_dir():
        return f"{ENV}={_value}: no codes/ folder there (expected the reference data: codes/, traces/)"
    if not (REFERENCE / "traces" / TRACE_NAME).is_file():
        return f"{ENV}={_value}: no traces/{TRACE_NAME} there (expected the reference data: codes/, traces/)"
    return None
