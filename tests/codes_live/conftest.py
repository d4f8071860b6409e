"""Live CODES tests: they run a real CODES build (scripts/build-codes.sh) and are skipped, each by name, without one.

Point ``CODES_BIN_DIR`` at the folder holding ``model-net-mpi-replay`` (the ``bin_dir`` the build script prints) and
run ``python -m pytest -q -rs -m codes_live tests/codes_live``. A ``CODES_BIN_DIR`` that is set but holds no
executable fails the tests instead of skipping them.
"""

from __future__ import annotations

import os

import pytest

CODES_BIN_DIR = os.environ.get("CODES_BIN_DIR", "")


#: the files of this folder that need a CODES build (test_build_codes_script.py checks the script without one)
LIVE_FILES = ("test_codes_live.py", "test_codes_standin_live.py", "test_codes_default_live.py")


def pytest_collection_modifyitems(config, items):
    here = os.path.dirname(os.path.abspath(__file__))
    for item in items:
        path = os.path.abspath(str(item.fspath))
        if os.path.dirname(path) != here or os.path.basename(path) not in LIVE_FILES:
            continue
        item.add_marker(pytest.mark.codes_live)
        # the reason carries the test's name so `pytest -rs` lists every skipped live test, not just a count
        item.add_marker(pytest.mark.skipif(
            not CODES_BIN_DIR,
            reason=f"{item.name}: CODES_BIN_DIR is not set (build CODES with scripts/build-codes.sh and export "
                   f"CODES_BIN_DIR=<the bin_dir it prints> to run the live CODES tests)"))
