"""CODES' stdout (``model-output.txt[.gz]``), ``ross.csv`` and ``time.txt``.

From stdout: per-rank completion (``Network node <i> Rank <r> App <j> finished at <t>``), per-job completion
(``Per App Max Elapsed Times`` block), the ROSS statistics block (events processed / rolled back / committed,
rollbacks, event rate, running time, GVTs), ROSS' "data missed" counts, and error lines. A stdout without the ROSS
statistics block means CODES did not finish: ``complete`` is False.
"""

from __future__ import annotations

import csv
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from .common import CodesParseError, find_file, numbered_lines, read_bytes

_FINISHED = re.compile(r"Network node (\d+) Rank (\d+) App (\d+) finished at ([-+0-9.eE]+)")
_APP = re.compile(r"^\s*App (\d+): ([-+0-9.eE]+)\s*$")
_RUNNING = re.compile(r"Running Time = ([0-9.eE+-]+) seconds")
_MISSED = re.compile(r"PE (\d+): There were (\d+) bytes of data missed")
_STAT = re.compile(r"^\s+([A-Za-z][A-Za-z ()/]*?)\s{2,}([-+0-9.eE]+)\s*%?\s*$")

#: stdout label of the TW Library Statistics block -> key in ``ross``
ROSS_LABELS = {
    "Total Events Processed": "events_processed",
    "Events Rolled Back": "events_rolled_back",
    "Events Aborted (part of RBs)": "events_aborted",
    "Efficiency": "efficiency_pct",
    "Total Roll Backs": "rollbacks",
    "Primary Roll Backs": "rollbacks_primary",
    "Secondary Roll Backs": "rollbacks_secondary",
    "Total GVT Computations": "gvt_computations",
    "Net Events Processed": "events_committed",
    "Event Rate (events/sec)": "event_rate",
    "Total Remote (network) Events Processed": "remote_network_events",
}


@dataclass
class ModelOutput:
    path: str
    job_end: dict = field(default_factory=dict)      # app id -> ns (Per App Max Elapsed Times)
    rank_end: dict = field(default_factory=dict)     # (app id, rank) -> ns
    ross: dict = field(default_factory=dict)
    complete: bool = False
    data_missed: dict = field(default_factory=dict)  # PE -> bytes of VT samples ROSS dropped
    errors: list = field(default_factory=list)       # "file:line: text" of lines with "error"
    surrogate_lines: list = field(default_factory=list)


def model_output_file(run_dir: str | os.PathLike) -> Path | None:
    return find_file(Path(run_dir) / "model-output.txt")


def parse_model_output(path: str | os.PathLike) -> ModelOutput:
    p = Path(path)
    out = ModelOutput(str(p))
    in_apps = False
    in_lib = False
    lib_done = False
    for n, line in numbered_lines(p):
        if "finished at" in line:
            m = _FINISHED.search(line)
            if m is None:
                raise CodesParseError(p, n, f"malformed 'finished at' line: {line.strip()[:120]!r}")
            out.rank_end[(int(m.group(3)), int(m.group(2)))] = float(m.group(4))
            continue
        if line.startswith("Per App Max Elapsed Times"):
            in_apps = True
            continue
        if in_apps:
            m = _APP.match(line)
            if m:
                out.job_end[int(m.group(1))] = float(m.group(2))
                continue
            if line.startswith("----------") or not line.strip():
                in_apps = False
                continue
            raise CodesParseError(p, n, f"unexpected line in 'Per App Max Elapsed Times': {line.strip()[:120]!r}")
        if "Running Time =" in line and "running_time_s" not in out.ross:
            m = _RUNNING.search(line)
            if m is None:
                raise CodesParseError(p, n, f"malformed Running Time line: {line.strip()[:120]!r}")
            out.ross["running_time_s"] = float(m.group(1))
            continue
        if line.startswith("TW Library Statistics"):
            in_lib = not lib_done
            continue
        if in_lib:
            if line and not line[0].isspace():
                in_lib, lib_done = False, True
            else:
                m = _STAT.match(line)
                if m and m.group(1).strip() in ROSS_LABELS:
                    key = ROSS_LABELS[m.group(1).strip()]
                    if key not in out.ross:
                        v = float(m.group(2))
                        out.ross[key] = int(v) if v.is_integer() and key != "efficiency_pct" else v
                continue
        m = _MISSED.search(line)
        if m:
            pe, b = int(m.group(1)), int(m.group(2))
            out.data_missed[pe] = out.data_missed.get(pe, 0) + b
            continue
        low = line.lower()
        if "error" in low and ("error:" in low or low.startswith("error")):
            out.errors.append(f"{p}:{n}: {line.strip()}")
        if "surrogate" in low and ("switch" in low or "triggering" in low or "time spent" in low):
            out.surrogate_lines.append(line.strip())
    out.complete = "events_committed" in out.ross and "running_time_s" in out.ross
    return out


def parse_ross_csv(path: str | os.PathLike) -> dict:
    """ROSS' one-line ``ross.csv``: header + values -> dict (numbers as int/float). The trailing 8 values of runs
    with analysis LPs (model / analysis LP events processed, rolled back, net, efficiency) are named too.
    An empty file (CODES died before the end) -> ``{}``."""
    p = Path(path)
    try:
        text = read_bytes(p).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CodesParseError(p, None, f"not a text file (byte {exc.start} is not UTF-8)") from None
    try:
        rows = list(csv.reader(text.splitlines()))
    except csv.Error as exc:
        raise CodesParseError(p, None, f"not a CSV file ({exc})") from None
    rows = [r for r in rows if r]
    if not rows:
        return {}
    if len(rows) != 2:
        raise CodesParseError(p, len(rows), f"expected a header and one value line, got {len(rows)} lines")
    head, vals = rows
    missing = [c for c in ROSS_CSV_REQUIRED if c not in head]
    if missing:
        raise CodesParseError(p, 1, f"not ROSS' ross.csv header (lacks {', '.join(missing)})")
    if len(vals) == len(head) - 2 and "remote_sends" in head and "remote_recvs" in head:
        # ROSS leaves the two network-statistics values out in runs without them (seen in sequential runs)
        head = [h for h in head if h not in ("remote_sends", "remote_recvs")]
    if len(vals) < len(head):
        raise CodesParseError(p, 2, f"{len(vals)} values for {len(head)} columns (truncated line)")
    names = list(head)
    extra = vals[len(head):]
    if len(extra) == 8:
        names += [f"{who}_{what}" for who in ("model_lps", "analysis_lps")
                  for what in ("events_processed", "events_rb", "net_events", "eff")]
    elif extra:
        names += [f"extra_{i}" for i in range(len(extra))]
    out = {}
    for k, v in zip(names, vals):
        try:
            x = float(v)
            out[k] = int(x) if re.fullmatch(r"[-+]?\d+", v.strip()) else x
        except ValueError:
            if k in ROSS_CSV_NUMERIC:
                raise CodesParseError(p, 2, f"column {k}: expected a number, got {v[:40]!r}") from None
            out[k] = v
    return out


#: columns every ross.csv has; and the ones the importer reads as numbers
ROSS_CSV_REQUIRED = ("total_pe", "total_lp", "net_events")
ROSS_CSV_NUMERIC = ("total_pe", "total_kp", "total_lp", "end_ts", "events_processed", "events_rb", "rb_total",
                    "net_events", "event_rate", "runtime", "num_gvt")


_ELAPSED = re.compile(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\):\s*(\S+)")
_BASH_REAL = re.compile(r"^real\s+(\d+)m([0-9.]+)s\s*$")
_NONZERO = re.compile(r"Command exited with non-zero status (\d+)")
_RSS = re.compile(r"Maximum resident set size \(kbytes\):\s*(\d+)")


def parse_time_txt(path: str | os.PathLike) -> dict:
    """``/usr/bin/time -v`` (or bash ``time``) output -> ``{"wall_s", "max_rss_kb", "exit_status"}`` (keys present
    when found; a non-empty file with none of them raises: it is not time's output)."""
    p = Path(path)
    out: dict = {}
    for n, line in numbered_lines(p):
        m = _ELAPSED.search(line)
        if m:
            parts = m.group(1).split(":")
            try:
                secs = 0.0
                for x in parts:
                    secs = secs * 60 + float(x)
            except ValueError:
                raise CodesParseError(p, n, f"bad elapsed time {m.group(1)!r}") from None
            out["wall_s"] = secs
            continue
        m = _RSS.search(line)
        if m:
            out["max_rss_kb"] = int(m.group(1))
            continue
        m = _BASH_REAL.match(line)
        if m:
            out["wall_s"] = float(m.group(1)) * 60 + float(m.group(2))
            continue
        m = _NONZERO.search(line)
        if m:
            out["exit_status"] = int(m.group(1))
            continue
        if "Exit status:" in line:
            try:
                out["exit_status"] = int(line.split(":")[-1])
            except ValueError:
                raise CodesParseError(p, n, f"bad exit status line {line.strip()!r}") from None
    if not out and p.stat().st_size:  # text, but none of it time's: a damaged or foreign file says nothing true
        raise CodesParseError(p, None, "not the output of /usr/bin/time -v or bash time (no elapsed time, exit "
                                       "status or memory line)")
    return out
