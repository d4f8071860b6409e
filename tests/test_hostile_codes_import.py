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
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

from codes_bridge.importer import import_codes_run, read_codes_run
from codes_bridge.parsers.common import CodesWarning
from hybridsim.cli import main as cli_main
from refdata import CODES

REPO = Path(__file__).resolve().parents[1]
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


# ------------------------------------------------------------------------------- synthetic run directories (no data)
SYN_SCENARIO = ("topology: {groups: 9, routers_per_group: 4, terminals_per_router: 2, global_channels_per_router: 2}\n"
                "jobs:\n  - {name: a, ranks: 4, iterations: 2, workload: {kind: milc, dimension_sizes: [2, 2], "
                "msg_size: 4096}}\n")
SAMPLES = 4


def synthetic_run(d: Path) -> Path:
    """The inputs hybridsim writes for a 72-node CODES run, its command line, and a raw VT binary of plausible
    router samples (what CODES' --model-stats=3 writes), built here: a run directory with no reference data."""
    from codes_bridge.conf import parse_conf
    from codes_bridge.parsers.ross_vt import HEADER_SIZE, router_dtype
    from codes_bridge.writers import write_codes_inputs
    from hybridsim.scenario import parse_scenario

    ci = write_codes_inputs(parse_scenario(SYN_SCENARIO), d)
    (d / "command.txt").write_text("mpirun -np 1 model-net-mpi-replay " + " ".join(ci.args) + "\n")
    conf = parse_conf(ci.conf)
    radix = conf.shape().radix
    routers = sorted(conf.lp_layout()["modelnet_dragonfly_dally_router"])
    dt = router_dtype(radix)
    rec = np.zeros(SAMPLES * len(routers), dtype=dt)
    interval = 250_000.0  # --vt-interval of the written command
    for s in range(SAMPLES):
        for i, lp in enumerate(routers):
            r = rec[s * len(routers) + i]
            r["lpid"], r["ts"], r["sample_sz"], r["flag"] = lp, (s + 1) * interval, dt.itemsize - HEADER_SIZE, 3
            r["router_id"], r["end_time"] = i, (s + 1) * interval
            r["busy_time"] = 1000.0 + i
            r["link_traffic"] = 4096 * (1 + i % 3)
            r["stalled_chunks"], r["vc_occupancy_sum"], r["queued_count"] = 2, 4096, 0
    (d / "ross-stats").mkdir()
    (d / "ross-stats" / "ross-stats-analysis-lps.bin").write_bytes(rec.tobytes())
    return d


def _record_field(run: Path, record: int, field: str, port: int = 0) -> tuple[int, int]:
    """(byte offset, size) of ``field`` (port ``port``) of router record ``record`` in the synthetic binary."""
    from codes_bridge.conf import parse_conf
    from codes_bridge.parsers.ross_vt import router_dtype

    dt = router_dtype(parse_conf(next(run.glob("dfdally-*.conf"))).shape().radix)
    sub, off = dt.fields[field][:2]
    size = sub.base.itemsize if sub.shape else sub.itemsize
    return record * dt.itemsize + off + port * size, size


def test_synthetic_run_imports(tmp_path):
    run = read(synthetic_run(tmp_path / "r"))
    assert run.ports is not None and run.ports.values.shape[:2] == (SAMPLES, 36 * 7)
    assert run.ports.interval == 250_000.0
    v = run.ports.values.reshape(SAMPLES, 36, 7, -1)
    assert v[2, 5, 0, 0] == 4096 * 3 and v[0, 5, 0, 1] == 1005.0  # bytes, busy ns of router 5 port 0


#: field damaged -> (new value bytes or a function of the old bytes, fragment of the error)
DAMAGE = {
    "traffic_high_byte": ("link_traffic", lambda b: b[:5] + b"\x7f" + b[6:], "link_traffic"),
    "traffic_sign": ("link_traffic", lambda b: b[:7] + b"\xff", "not a finite count >= 0"),
    "busy_negative": ("busy_time", lambda b: b[:7] + bytes([b[7] ^ 0x80]), "busy_time"),
    "busy_exponent": ("busy_time", lambda b: b[:7] + bytes([b[7] ^ 0x3f]), "longer than the simulation"),
    "busy_nan": ("busy_time", lambda b: b"\xff" * 8, "not a finite count"),
    "stalled_high_byte": ("stalled_chunks", lambda b: b[:4] + b"\x01" + b[5:], "stalled_chunks"),
    "queued_sign": ("queued_count", lambda b: b[:3] + b"\xff", "queued_count"),
    "router_id": ("router_id", lambda b: b"\x07" + b[1:], "router_id 7, but lpid"),
    "end_time": ("end_time", lambda b: b[:6] + bytes([b[6] ^ 0x01]) + b[7:], "end_time"),
    "ts_off_grid": ("ts", lambda b: bytes([b[0] ^ 0x01]) + b[1:], None),
}


@pytest.mark.parametrize("name", sorted(DAMAGE))
def test_flipped_bytes_in_the_vt_binary_are_refused(tmp_path, name):
    # on main a flipped counter, id or time was imported as a complete run
    run = synthetic_run(tmp_path / "r")
    field, change, needle = DAMAGE[name]
    binf = run / "ross-stats" / "ross-stats-analysis-lps.bin"
    buf = bytearray(binf.read_bytes())
    off, size = _record_field(run, 40, field, port=3 if field in ("link_traffic", "busy_time", "stalled_chunks",
                                                                     "queued_count") else 0)
    buf[off:off + size] = change(bytes(buf[off:off + size]))
    binf.write_bytes(bytes(buf))
    msg = refused(run, str(binf))
    assert "damaged record" in msg, msg
    if needle:
        assert needle in msg, msg
    if field in ("router_id", "end_time"):
        assert "record 40 at byte offset" in msg, msg


def test_garbage_time_txt_is_refused(tmp_path):
    run = synthetic_run(tmp_path / "r")
    (run / "time.txt").write_bytes(bytes(range(256)) * 4)
    refused(run, "time.txt", "not the output of /usr/bin/time")
    (run / "time.txt").write_text("\tElapsed (wall clock) time (h:mm:ss or m:ss): 0:03.86\n\tExit status: 0\n")
    assert read(run).wall_s == 3.86


def test_absurd_rank_count_in_workload_conf_is_refused_before_any_allocation(tmp_path, capsys):
    # on main: 999999999999 ranks asked numpy for 7.28 TiB (a traceback)
    run = synthetic_run(tmp_path / "r")
    (run / "workloads.conf").write_text("4 ./a.json 0 0\n999999999999 ./a.json 0 0\n")
    refused(run, "workloads.conf:2", "need 1000000000003 ranks", "72 terminals")
    (run / "workloads.conf").write_text("72 ./a.json 0 0\n1 synthetic1 0 1000\n")  # one over
    refused(run, "workloads.conf:2", "73 ranks")
    out = tmp_path / "out"
    assert cli_main(["import-codes", str(run), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "workloads.conf:2" in err and "Traceback" not in err and not out.exists()


@pytest.mark.parametrize("where", ["iteration-logs/pe=0.txt", "dfdally-72.conf"])
def test_a_fifo_is_refused_not_waited_on(tmp_path, where):
    # on main a FIFO as an iteration log (or as the network .conf) blocked the import forever
    run = synthetic_run(tmp_path / "r")
    fifo = run / where
    fifo.parent.mkdir(exist_ok=True)
    if fifo.exists():
        fifo.unlink()
    os.mkfifo(fifo)
    r = subprocess.run([sys.executable, "-m", "hybridsim", "import-codes", str(run), "-o", str(tmp_path / "out")],
                       capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "out").exists()
    if where.endswith(".txt"):
        assert f"{fifo}: not a regular file (a FIFO)" in r.stderr, r.stderr
    else:
        assert "no CODES network .conf" in r.stderr, r.stderr
