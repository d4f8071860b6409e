"""The fixtures in tests/data and benchmarks/scenarios/codes are byte copies of the reference data
(docs/reference-data.md): the tests that run without ``HYBRIDSIM_REFERENCE_DATA`` check the same files as those that run with it."""

from __future__ import annotations

import gzip
import importlib.util

import pytest

import refdata

pytestmark = pytest.mark.reference_data


def _bundle():
    spec = importlib.util.spec_from_file_location("refdata_bundle", refdata.DATA / "bundle.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_bundled_codes_files_are_byte_copies_and_complete():
    here = sorted(p.relative_to(refdata.CODES).as_posix() for p in refdata.CODES.rglob("*") if p.is_file())
    assert here == sorted(_bundle().selected(refdata.REFERENCE_CODES)), "rebuild with tests/data/bundle.py"
    differ = [rel for rel in here if (refdata.CODES / rel).read_bytes() != (refdata.REFERENCE_CODES / rel).read_bytes()]
    assert not differ, differ


def test_bundled_trace_is_the_reference_trace():
    with gzip.open(refdata.TRACE_GZ, "rb") as fh:
        assert fh.read() == (refdata.REFERENCE / "traces" / refdata.TRACE_NAME).read_bytes()


#: benchmarks/scenarios/codes/<name> -> its source in the reference codes/ folder
SCENARIO_INPUTS = {
    "dfdally-72-intra": "dfdally-72-intra", "dfdally-72-inter": "dfdally-72-inter",
    "dfdally-1056-intra": "C-1056node-milc-lammps-nn/dfdally-1056-intra",
    "dfdally-1056-inter": "C-1056node-milc-lammps-nn/dfdally-1056-inter",
    "B-72node-milc-alloc-72.conf": "B-72node-milc/hf-seq/alloc-72.conf",
    "C-1056node-milc-lammps-nn-alloc-random.conf": "C-1056node-milc-lammps-nn/hf-random-seq/alloc-random.conf",
    "E-72node-milc-lammps-syn-alloc-random.conf": "E-72node-milc-lammps-syn/hf-random-seq/alloc-random.conf",
}


def test_benchmark_scenario_inputs_are_the_reference_files(repo):
    folder = repo / "benchmarks" / "scenarios" / "codes"
    assert sorted(p.name for p in folder.iterdir()) == sorted(SCENARIO_INPUTS)
    for name, source in SCENARIO_INPUTS.items():
        assert (folder / name).read_bytes() == (refdata.REFERENCE_CODES / source).read_bytes(), name
