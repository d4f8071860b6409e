"""Iteration-log parser against the reference CODES runs and hand-made bad input."""

from __future__ import annotations

import gzip
import random

import pytest

from codes_bridge.parsers.common import CodesParseError, CodesWarning, IncrementalReader
from codes_bridge.parsers.iteration_logs import IterationLogTail, parse_iteration_logs, parse_line
from refdata import CODES



def test_counts_and_chaining_on_1056_node_run():
    recs, sim = parse_iteration_logs(CODES / "C-1056node-milc-lammps-nn" / "hf-random-seq",
                                     ["milc-512", "lammps-256", "nn-256"])
    assert len(recs) == 512 * 6 + 256 * 6 == 4608
    assert all(sim)
    assert sum(r.job_id == 0 for r in recs) == 512 * 6
    assert sum(r.job_id == 1 for r in recs) == 256 * 6
    assert {r.job for r in recs} == {"milc-512", "lammps-256"}  # nearest_neighbor marks no iterations
    # start = previous mark of the same rank (0 for the first), iterations 0..5 in order
    by = {}
    for r in recs:
        by.setdefault((r.job_id, r.rank), []).append(r)
    assert len(by) == 512 + 256
    for rs in by.values():
        assert [r.iteration for r in rs] == list(range(6))
        assert rs[0].start == 0.0
        for a, b in zip(rs, rs[1:]):
            assert b.start == a.end and b.end > b.start


def test_raw_line_values_kept_exactly():
    text = (CODES / "B-72node-milc" / "hf-seq" / "iteration-logs" / "pe=0.txt").read_text().splitlines()
    line = text[0]  # e.g. "ITERATION 0 node 39 job 0 rank 39 time 436...."
    m = parse_line(line, "x", 1)
    recs, _ = parse_iteration_logs(CODES / "B-72node-milc" / "hf-seq")
    r = next(r for r in recs if r.rank == m.rank and r.iteration == m.iteration)
    assert r.end == float(line.split()[-1])


def test_optimistic_two_pe_logs_equal_sequential():
    seq, _ = parse_iteration_logs(CODES / "B-72node-milc" / "hf-seq")
    opt, _ = parse_iteration_logs(CODES / "B-72node-milc" / "hf-opt-np2")
    assert len(seq) == 72 * 20
    assert seq == opt


def test_line_order_does_not_matter(tmp_path):
    lines = (CODES / "B-72node-milc" / "hf-seq" / "iteration-logs" / "pe=0.txt").read_text().splitlines()
    random.Random(3).shuffle(lines)
    d = tmp_path / "iteration-logs"
    d.mkdir()
    half = len(lines) // 2
    (d / "pe=0.txt").write_text("\n".join(lines[:half]) + "\n")
    with gzip.open(d / "pe=1.txt.gz", "wt") as fh:
        fh.write("\n".join(lines[half:]) + "\n")
    a, _ = parse_iteration_logs(tmp_path)
    b, _ = parse_iteration_logs(CODES / "B-72node-milc" / "hf-seq")
    assert a == b


def test_skipped_to_iteration_lines_are_not_simulated():
    recs, sim = parse_iteration_logs(CODES / "B-72node-milc" / "surrogate-patched-seq", ["milc"])
    assert len(recs) == 72 * 5 and sim.count(False) == 72
    r3 = [r for r, s in zip(recs, sim) if r.rank == 3]
    assert [r.iteration for r in r3] == [0, 1, 2, 3, 19]
    skipped = [r for r, s in zip(recs, sim) if not s]
    assert all(r.iteration == 19 and r.end == 8671699.196722 for r in skipped)
    assert r3[-1].start == r3[-2].end


def _write(tmp_path, text):
    d = tmp_path / "iteration-logs"
    d.mkdir(exist_ok=True)
    p = d / "pe=0.txt"
    p.write_text(text)
    return p


GOOD = "ITERATION 0 node 5 job 0 rank 1 time 100.5\nITERATION 1 node 5 job 0 rank 1 time 250.0\n"


def test_malformed_line_reports_file_and_line(tmp_path):
    p = _write(tmp_path, GOOD + "ITERATION 2 node 5 job zero rank 1 time 300\n" + GOOD.replace("rank 1", "rank 2"))
    with pytest.raises(CodesParseError) as ei:
        parse_iteration_logs(tmp_path)
    assert ei.value.path == str(p) and ei.value.line == 3
    assert f"{p}:3:" in str(ei.value)


def test_truncated_last_line(tmp_path):
    p = _write(tmp_path, GOOD + "ITERATION 2 node 5 jo")
    with pytest.raises(CodesParseError, match=r"pe=0.txt:3: truncated last line"):
        parse_iteration_logs(tmp_path)
    sink = []
    with pytest.warns(CodesWarning, match=r"pe=0.txt:3: dropped the truncated last line"):
        recs, _ = parse_iteration_logs(tmp_path, allow_truncated_last=True, warnings=sink)
    assert len(recs) == 2 and len(sink) == 1
    # a complete last line without newline is fine
    _write(tmp_path, GOOD + "ITERATION 2 node 5 job 0 rank 1 time 400")
    recs, _ = parse_iteration_logs(tmp_path)
    assert [(r.start, r.end) for r in recs] == [(0.0, 100.5), (100.5, 250.0), (250.0, 400.0)]
    assert p.exists()


def test_duplicate_mark_and_bad_time(tmp_path):
    _write(tmp_path, GOOD + "ITERATION 1 node 5 job 0 rank 1 time 260.0\n")
    with pytest.raises(CodesParseError, match=r"pe=0.txt:3: duplicate mark"):
        parse_iteration_logs(tmp_path)
    _write(tmp_path, GOOD + "ITERATION 2 node 5 job 0 rank 1 time nan\n")
    with pytest.raises(CodesParseError, match=r"pe=0.txt:3: bad time"):
        parse_iteration_logs(tmp_path)


def test_job_id_outside_workload_file(tmp_path):
    _write(tmp_path, GOOD.replace("job 0", "job 4"))
    with pytest.raises(CodesParseError, match=r"job id 4 not in the workload file \(2 jobs\)"):
        parse_iteration_logs(tmp_path, ["a", "b"])


def test_incremental_reader_keeps_partial_line(tmp_path):
    p = tmp_path / "f.txt"
    r = IncrementalReader(p)
    assert r.read_new() == []  # not there yet
    p.write_bytes(b"one\ntw")
    assert r.read_new() == [(1, "one")]
    with open(p, "ab") as fh:
        fh.write(b"o\nthree\nfo")
    assert r.read_new() == [(2, "two"), (3, "three")]
    assert r.read_new() == []
    assert r.finish() == (4, "fo")
    p.write_bytes(b"x")
    with pytest.raises(CodesParseError, match="shrank"):
        r.read_new()


def test_tail_while_codes_writes(tmp_path):
    lines = (CODES / "B-72node-milc" / "hf-seq" / "iteration-logs" / "pe=0.txt").read_text()
    d = tmp_path / "iteration-logs"
    d.mkdir()
    tail = IterationLogTail(tmp_path, ["milc-72"])
    assert tail.poll() == []
    p = d / "pe=0.txt"
    cut = len(lines) // 3 + 7  # mid-line
    p.write_text(lines[:cut])
    first = tail.poll()
    assert len(first) == lines[:cut].count("\n")
    with open(p, "a") as fh:
        fh.write(lines[cut:])
    rest = tail.poll()
    assert len(first) + len(rest) == 1440
    recs, sim = tail.finish()
    assert recs == parse_iteration_logs(CODES / "B-72node-milc" / "hf-seq", ["milc-72"])[0]
