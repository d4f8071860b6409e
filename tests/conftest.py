import os
import sys
from pathlib import Path

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # hybridsim importable wherever pytest is started
    sys.path.insert(0, str(REPO))
from hybridsim import plugins  # noqa: E402

plugins.add_path(REPO)  # examples/ (the plug-in policy) importable as --plugin-path would make it
CODES_DATA = REPO.parent / "shared" / "data" / "codes"


@pytest.fixture(scope="session")
def codes_data() -> Path:
    assert CODES_DATA.is_dir(), f"reference CODES data not found at {CODES_DATA}"
    return CODES_DATA


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO
