"""Where the tests find the NASA iPSC/860 SWF trace: ``$HYBRIDSIM_REFERENCE_DATA/traces/``, else a copy in
``tests/data/`` (plain or gzipped); tests that need it are skipped, by name, when neither is there."""

import os
from pathlib import Path

import pytest

NASA_NAME = "NASA-iPSC-1993-3.1-cln.swf"
_HERE = Path(__file__).resolve().parent


def nasa_trace() -> Path | None:
    cands = []
    if os.environ.get("HYBRIDSIM_REFERENCE_DATA"):
        cands.append(Path(os.environ["HYBRIDSIM_REFERENCE_DATA"]) / "traces" / NASA_NAME)
    cands += [_HERE / "data" / NASA_NAME, _HERE / "data" / (NASA_NAME + ".gz")]
    return next((p for p in cands if p.is_file()), None)


NASA = nasa_trace()
needs_nasa = pytest.mark.skipif(NASA is None, reason=f"{NASA_NAME} not found (set HYBRIDSIM_REFERENCE_DATA to the "
                                                     "folder holding traces/, or put it in tests/data)")
