import gzip
import os
import shutil
import sys
from pathlib import Path

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # hybridsim importable wherever pytest is started
    sys.path.insert(0, str(REPO))
from hybridsim_common import plugins  # noqa: E402

plugins.add_path(REPO)  # examples/ (the plug-in policy) importable as --plugin-path would make it

TESTS = str(Path(__file__).resolve().parent)
if TESTS not in sys.path:  # refdata and fakes importable whatever the import mode
    sys.path.insert(0, TESTS)

import refdata  # noqa: E402


def pytest_configure(config):
    config.addinivalue_line(
        "markers", f"reference_data: compares against the full reference CODES runs ({refdata.ENV}); "
                   "skipped by name without it")
    bad = refdata.problem()
    if bad:
        raise pytest.UsageError(bad)


def pytest_collection_modifyitems(config, items):
    if refdata.REFERENCE is not None:
        return
    for item in items:
        if item.get_closest_marker("reference_data"):
            # the reason carries the test's name so `pytest -rs` lists every skipped test, not a count
            item.add_marker(pytest.mark.skip(reason=f"{item.name}: {refdata.SKIP_HINT}"))


@pytest.fixture(scope="session")
def codes_data() -> Path:
    """The bundled reference CODES files (tests/data/codes, the layout of the reference data's codes/)."""
    return refdata.CODES


@pytest.fixture(scope="session")
def swf_trace(tmp_path_factory) -> Path:
    """The NASA iPSC/860 SWF trace, unpacked from tests/data into a temporary folder."""
    out = tmp_path_factory.mktemp("trace") / refdata.TRACE_NAME
    with gzip.open(refdata.TRACE_GZ, "rb") as src, open(out, "wb") as dst:
        shutil.copyfileobj(src, dst)
    return out


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture
def live_only_policy(tmp_path) -> str:
    """A policy plug-in with no plan-ahead form (``Policy.ahead`` None: it decides as the run goes), written as
    ``liveonly.py`` into ``tmp_path`` (give ``--plugin-path tmp_path``); returns its ``module:Class`` name."""
    (tmp_path / "liveonly.py").write_text(
        "from controllers.base import Policy\n"
        "class LiveOnly(Policy):\n"
        "    plans_ahead = False\n"
        "    def decide(self, view):\n"
        "        return 'simulate'\n")
    return "liveonly:LiveOnly"
