"""Damaged copies of the reference CODES runs (made in tmp_path) against the importer: every one must either fail
with an error naming the file (and the line, record or offset) -- never a traceback, a huge allocation or a hang --
or, where CODES finished the run, never be imported as complete after losing data (docs/codes.md, "What an import
promises"). Undamaged copies still import complete, so the checks do not fire on good data."""

from __future__ import annotations

import gzip
import os
import shutil
import stat
import struct
import time
import warnings
from pathlib import Path

import pytest

from codes_bridge.importer import import_codes_run, read_codes_run
from codes_bridge.parsers.common import CodesWarning
from hybridsim.cli import main as cli_main
from refdata import CODES

B_OPT = CODES / "B-72node-milc" / "hf-opt-np2"          # 2 PEs, decoded VT CSVs
B_SEQ = CODES / "B-72node-milc" / "hf-seq"
A_SEQ = CODES / "A-72node-synthetic-uniform" / "seq"    # raw VT binary
C_NET = CODES / "C-1056node-milc-lammps-nn" / "netsurr-fixed-random-seq"  # 3 jobs
BIN = "ross-stats-raw/ross-stats-analysis-lps.bin.gz"


def copy_run(src: Path, dst: Path, skip: tuple[str, ...] = ()) -> Path:
    shutil.copytree(src, dst, ignore=lambda d, names: [n for n in names if n in skip])
    for root, dirs, files in os.walk(dst):
        for n in dirs + files:
            p = os.path.join(root, n)
            os.chmod(p, os.stat(p).st_mode | stat.S_IWUSR)
    os.chmod(dst, os.stat(dst).st_mode | stat.S_IWUSR)
    return dst


def read(run: Path, **kw):
    t0 = time.monotonic()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", CodesWarning)
            return read_codes_run(run, **kw)
    finally:
        assert time.monotonic() - t0 < 60


def refused(run: Path, *needles: str, **kw) -> str:
    """The import fails with a ValueError (CodesParseError / ConfError / CodesImportError) whose text has every
    needle; returns the text."""
    with pytest.raises(ValueError) as ei:
        read(run, **kw)
    msg = str(ei.value)
    for n in needles:
        assert n in msg, msg
    return msg


def test_undamaged_copies_import_complete(tmp_path):
    for src in (B_OPT, A_SEQ):
        run = read(copy_run(src, tmp_path / src.name))
        assert not run.partial
    # the decoded CSVs are an equivalent source: without the binary nothing is lost
    a = copy_run(A_SEQ, tmp_path / "a-nobin")
    (a / BIN).unlink()
    run = read(a)
    assert not run.partial and run.port_source.endswith("vt-router.csv.gz")


def test_truncated_gz_iteration_log(tmp_path):
    run = copy_run(B_OPT, tmp_path / "r")
    log = run / "iteration-logs" / "pe=1.txt"
    data = gzip.compress(log.read_bytes())
    log.unlink()
    (run / "iteration-logs" / "pe=1.txt.gz").write_bytes(data[: len(data) // 2])
    refused(run, "pe=1.txt.gz", "truncated .gz")


def test_truncated_gz_stdout(tmp_path):
    run = copy_run(B_SEQ, tmp_path / "r")
    data = gzip.compress((run / "model-output.txt").read_bytes())
    (run / "model-output.txt").unlink()
    (run / "model-output.txt.gz").write_bytes(data[: len(data) * 2 // 3])
    refused(run, "model-output.txt.gz: after line", "truncated .gz file")


def test_missing_iteration_log(tmp_path):
    run = copy_run(B_OPT, tmp_path / "r")
    (run / "iteration-logs" / "pe=1.txt").unlink()
    refused(run, "no pe=1.txt (2 PEs ran)", "ranks", "CODES finished this run")


def test_iteration_lines_lost_inside_and_at_the_end(tmp_path):
    run = copy_run(B_SEQ, tmp_path / "r")
    log = run / "iteration-logs" / "pe=0.txt"
    lines = log.read_text().splitlines(keepends=True)
    victim = next(i for i, l in enumerate(lines) if l.startswith("ITERATION 7 node 3 "))
    log.write_text("".join(lines[:victim] + lines[victim + 1:]))
    refused(run, "job milc-72 rank 3 jumps from iteration 6 to 8")
    last = next(i for i, l in enumerate(lines) if l.startswith("ITERATION 19 node 5 "))
    log.write_text("".join(lines[:last] + lines[last + 1:]))
    refused(run, "job milc-72 rank 5 stops at iteration 18, other ranks at 19")


def test_dropped_vt_samples(tmp_path):
    run = copy_run(A_SEQ, tmp_path / "r", skip=("ross-stats-decoded",))
    (run / BIN).unlink()
    refused(run, "asked for ROSS VT samples (--model-stats=3)", "ross-stats-analysis-lps.bin")
    out = tmp_path / "out"
    assert cli_main(["import-codes", str(run), "-o", str(out)]) == 2
    assert not out.exists()


@pytest.mark.parametrize("record, lpid", [(0, 1 << 43), (5, (1 << 64) - 1), (700, 180)])
def test_corrupt_lpid_in_vt_binary(tmp_path, record, lpid):
    run = copy_run(A_SEQ, tmp_path / "r", skip=("ross-stats-decoded",))
    buf = bytearray(gzip.decompress((run / BIN).read_bytes()))
    off = 0
    for _ in range(record):  # walk the framing: header <QQQddii, payload of sample_sz bytes
        off += 48 + struct.unpack_from("<i", buf, off + 40)[0]
    struct.pack_into("<Q", buf, off, lpid)
    (run / BIN).write_bytes(gzip.compress(bytes(buf)))
    refused(run, "ross-stats-analysis-lps.bin.gz", f"record {record} at byte offset {off}", f"lpid {lpid}",
            "corrupt header")


def test_truncated_workload_conf(tmp_path):
    run = copy_run(B_SEQ, tmp_path / "r")
    (run / "workload.conf").write_text("72 ./milc-7")
    refused(run, "workload.conf:1", "truncated file?")


def test_workload_line_lost(tmp_path):
    run = copy_run(C_NET, tmp_path / "r")
    wl = run / "workloads.conf"
    wl.write_text("".join(wl.read_text().splitlines(keepends=True)[:2]))
    refused(run, "model-output.txt: CODES reports app ids up to 2", "workloads.conf lists 2 jobs")


@pytest.mark.parametrize("content, needles", [
    (b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe garbage", ("dfdally-72-milc.conf", "not a text file")),
    (b"LPGROUPS\n{\n MODELNET_GRP\n {\n repetitions=\"36\";\n ???\n", ("dfdally-72-milc.conf:6",)),
    (b'LPGROUPS { G { repetitions="1"; nw-lp="1"; } }\nPARAMS { num_groups="abc"; }\n',
     ("dfdally-72-milc.conf:2", "num_groups: expected a number")),
    (b'LPGROUPS { G { repetitions="1"; nw-lp="1"; } }\nPARAMS { num_groups="1000000000"; num_routers="1000";'
     b' num_cns_per_router="2"; num_global_channels="2"; }\n', ("dfdally-72-milc.conf:2", "implausible dragonfly")),
])
def test_garbage_conf(tmp_path, content, needles):
    run = copy_run(B_SEQ, tmp_path / "r")
    (run / "dfdally-72-milc.conf").write_bytes(content)
    refused(run, *needles)


@pytest.mark.parametrize("content, needles", [
    (bytes(range(256)) * 4, ("ross.csv", "not a text file")),
    (b"a,b,c\n1,2,3\n", ("ross.csv:1", "not ROSS' ross.csv header")),
    (b"total_pe,total_lp,net_events\n1,abc,3\n", ("ross.csv:2", "column total_lp")),
    (b"total_pe,total_lp,net_events\n1,2\n", ("ross.csv:2", "truncated line")),
])
def test_garbage_ross_csv(tmp_path, content, needles):
    run = copy_run(B_SEQ, tmp_path / "r")
    (run / "ross.csv").write_bytes(content)
    refused(run, *needles)


@pytest.mark.parametrize("content, needles", [
    (b"\xff\xfe\x00garbage\x80", ("command.txt", "not a text file")),
    (b"hello world\n", ("command.txt:1", "no CODES command line")),
    (b"model-net-mpi-replay --synch=1 --vt-interval=abc --workload_conf_file=workload.conf -- dfdally-72-milc.conf",
     ("command.txt:1", "--vt-interval=abc: expected a number")),
])
def test_garbage_command_txt(tmp_path, content, needles):
    run = copy_run(B_SEQ, tmp_path / "r")
    (run / "command.txt").write_bytes(content)
    refused(run, *needles)


def test_cli_names_the_file_and_writes_nothing(tmp_path, capsys):
    run = copy_run(B_OPT, tmp_path / "r")
    (run / "iteration-logs" / "pe=0.txt").unlink()
    out = tmp_path / "out"
    assert cli_main(["import-codes", str(run), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "pe=0.txt" in err and "Traceback" not in err and not out.exists()


def test_a_partial_run_lists_what_is_missing(tmp_path):
    """A run CODES did not finish is imported as partial, and the warnings say what is missing."""
    run = copy_run(B_OPT, tmp_path / "r")
    mo = run / "model-output.txt"
    text = mo.read_text()
    mo.write_text(text[: text.index("TW Library Statistics")])  # CODES died before its end statistics
    (run / "iteration-logs" / "pe=1.txt").unlink()
    (run / "ross.csv").write_text("")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CodesWarning)
        r = import_codes_run(run, tmp_path / "out")
    assert r.partial
    assert any("missing from this partial run" in w and "no marks for 36 of its 72 ranks" in w for w in r.warnings)
    assert (tmp_path / "out" / "manifest.json").is_file()
