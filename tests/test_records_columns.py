"""Records in bulk (issue 31, item 5): :class:`IterationColumns` against the per-object path.

A run's records are held as columns (the native core keeps them itself and hands them over at the end of the run);
every reader gets what a list of :class:`IterationRecord` gave: the same records one by one, the same
iterations.parquet byte for byte, the same job summaries, pure tables and truth biases. Hand-checkable cases here;
the cores' and the fast-forward's identity tests (tests/test_native_core.py, tests/test_fast_forward.py) run whole
scenarios through it."""

import math

import numpy as np
import pytest

from hybridsim.bench import _pure_tables, truth_bias
from hybridsim.runner import job_summary
from hybridsim.scenario import parse_scenario
from hybridsim_common.records import (IterationColumns, IterationRecord, RecordBlock, iterations_to_table,
                                      read_iterations, records_from_table, write_iterations)

SC = parse_scenario("""
topology: {groups: 9, routers_per_group: 4, terminals_per_router: 2, global_channels_per_router: 2}
jobs:
  - {name: a, ranks: 2, iterations: 3, workload: {kind: allreduce}}
  - {name: b, ranks: 2, iterations: 3, workload: {kind: allreduce}}
""")

#: job a: ranks 0 and 1, iteration 0 simulated (0-10 and 0-12 ns), iteration 1 predicted (10-20, 12-22); job b:
#: rank 0's iteration 0 simulated (5-9); in event order
OBJECTS = [IterationRecord("a", 0, 0, 0, 0.0, 10.0), IterationRecord("a", 0, 1, 0, 0.0, 12.0),
           IterationRecord("b", 1, 0, 0, 5.0, 9.0),
           IterationRecord("a", 0, 0, 1, 10.0, 20.0), IterationRecord("a", 0, 1, 1, 12.0, 22.0)]
FLAGS = [True, True, True, False, False]


def bulk() -> IterationColumns:
    """OBJECTS the bulk way: the simulated ones one by one, the predicted ones as one block of arrays."""
    c = IterationColumns(["a", "b"])
    for r in OBJECTS[:3]:
        c.append(r.job_id, r.rank, r.iteration, r.start, r.end, True)
    c.extend_columns(np.array([0, 0], np.int32), np.array([0, 1], np.int32), np.array([1, 1], np.int32),
                     np.array([10.0, 12.0]), np.array([20.0, 22.0]), np.zeros(2, np.int8))
    return c


def test_columns_read_back_as_the_records_one_by_one():
    c = bulk()
    assert len(c) == 5 and list(c) == OBJECTS and c == OBJECTS
    assert c[3] == OBJECTS[3] and c[-1] == OBJECTS[-1] and c[1:3] == OBJECTS[1:3]
    assert type(c[0].start) is float and type(c[0].rank) is int
    assert list(c.simulated) == FLAGS and c.simulated == FLAGS and c.simulated[3] is False
    with pytest.raises(IndexError):
        c[5]
    cols = c.columns()
    assert cols["job_id"].tolist() == [0, 0, 1, 0, 0] and cols["iteration"].tolist() == [0, 0, 0, 1, 1]
    assert cols["end"].tolist() == [10.0, 12.0, 9.0, 20.0, 22.0] and cols["simulated"].tolist() == FLAGS
    # a record appended after the columns were read is in them the next time, after the others
    c.append(1, 1, 0, 5.0, 8.0, True)
    assert c[-1] == IterationRecord("b", 1, 1, 0, 5.0, 8.0) and c.columns()["rank"].tolist()[-1] == 1
    # the records and flags of the same run compare equal whichever way they were made
    d = IterationColumns(["a", "b"])
    for r, s in zip(OBJECTS, FLAGS):
        d.append(r.job_id, r.rank, r.iteration, r.start, r.end, s)
    assert d == bulk() and d != c


def test_a_block_reads_its_rows_only_when_read():
    reads = []

    def read(lo, hi):
        reads.append((lo, hi))
        cols = bulk().columns()
        return tuple(cols[k][lo:hi] for k in ("job_id", "rank", "iteration", "start", "end", "simulated"))

    b = RecordBlock(["a", "b"], read, 3, 5)
    assert len(b) == 2 and reads == []
    assert list(b) == OBJECTS[3:] and reads == [(3, 5)]


def test_the_iterations_table_is_the_per_object_one_byte_for_byte(tmp_path):
    assert iterations_to_table(bulk()).equals(iterations_to_table(OBJECTS))
    extra = {"mode": ["simulate"] * 3 + ["predict"] * 2, "predicted": [math.nan] * 3 + [10.0, 10.0]}
    write_iterations(bulk(), tmp_path / "bulk.parquet", extra=extra)
    write_iterations(OBJECTS, tmp_path / "objects.parquet", extra=extra)
    assert (tmp_path / "bulk.parquet").read_bytes() == (tmp_path / "objects.parquet").read_bytes()
    back = records_from_table(read_iterations(tmp_path / "bulk.parquet"))
    # the table is sorted by job, rank, iteration; every row reads back as a simulated record
    assert list(back) == sorted(OBJECTS, key=lambda r: (r.job_id, r.rank, r.iteration)) and all(back.simulated)


def test_job_summary_from_the_columns_is_the_hand_computed_one():
    for records in (bulk(), OBJECTS):
        js = job_summary(SC, records)
        # a: durations 10, 12, 10, 10: mean 10.5, std sqrt(0.75), completion 22; b: one of 4 ns, completion 9
        assert js["a"]["iterations_recorded"] == 4 and js["a"]["completion_time_ns"] == 22.0
        assert js["a"]["mean_iteration_ns"] == 10.5 and js["a"]["std_iteration_ns"] == pytest.approx(math.sqrt(0.75))
        assert (js["b"]["iterations_recorded"], js["b"]["completion_time_ns"], js["b"]["mean_iteration_ns"]) == \
            (1, 9.0, 4.0)
    assert job_summary(SC, bulk()) == job_summary(SC, OBJECTS)


def test_pure_tables_and_truth_bias_from_the_columns_are_the_per_object_ones():
    t_bulk, t_obj = _pure_tables(SC, bulk()), _pure_tables(SC, OBJECTS)
    assert t_bulk.keys() == t_obj.keys() == {0, 1}
    for k in t_obj:
        np.testing.assert_array_equal(t_bulk[k], t_obj[k])
    assert t_bulk[0][:, :2].tolist() == [[10.0, 10.0], [12.0, 10.0]] and np.isnan(t_bulk[0][:, 2]).all()
    # the hybrid run: job a's iteration 0 took 11 and 13.2 ns (job time 12.1 against the pure run's 11), iteration 1
    # predicted; b's iteration 0 predicted over 14-21 ns, after a's iteration 0 (0-13.2 ns)
    hyb = IterationColumns(["a", "b"])
    for r in (IterationRecord("a", 0, 0, 0, 0.0, 11.0), IterationRecord("a", 0, 1, 0, 0.0, 13.2)):
        hyb.append(r.job_id, r.rank, r.iteration, r.start, r.end, True)
    hyb.extend_columns([0, 0, 1], [0, 1, 0], [1, 1, 0], [11.0, 13.2, 14.0], [21.0, 23.2, 21.0], [0, 0, 0])
    objects, flags = list(hyb), list(hyb.simulated)
    for beside in (False, True):
        got, want = truth_bias(SC, bulk(), hyb, hyb.simulated, beside), truth_bias(SC, OBJECTS, objects, flags, beside)
        assert got == want
    # +10 %; beside a predicted co-runner: none (b's silence does not meet a's iteration 0), then b moved to 13 ns
    assert truth_bias(SC, bulk(), hyb, hyb.simulated)["a"] == pytest.approx(10.0)
    assert truth_bias(SC, bulk(), hyb, hyb.simulated, beside_predicted=True)["a"] is None
    hyb2 = IterationColumns(["a", "b"])
    hyb2.extend_columns(*(hyb.columns()[k] for k in ("job_id", "rank", "iteration", "start", "end")),
                        hyb.columns()["simulated"])
    hyb2.extend_columns([1], [1], [0], [13.0], [21.0], [False])
    assert truth_bias(SC, bulk(), hyb2, hyb2.simulated, beside_predicted=True)["a"] == pytest.approx(10.0)
    assert truth_bias(SC, bulk(), hyb2, hyb2.simulated, True) == truth_bias(SC, OBJECTS, list(hyb2),
                                                                            list(hyb2.simulated), True)
