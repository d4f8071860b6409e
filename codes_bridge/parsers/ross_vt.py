"""ROSS model-level virtual-time samples of a CODES dragonfly-dally + model-net-mpi-replay run.

Two sources, one result (a :class:`VtSamples`: per LP kind a dict of numpy columns sorted by ``(ts, lpid)``, with
the column names of CODES' ``scripts/parse-ross-model-stats.py`` CSVs):

* :func:`read_vt_bin` decodes ``ross-stats-analysis-lps.bin`` directly (layout: docs/codes-formats.md §4;
  48-byte header ``<QQQddii`` + payload; LP kind from the lpid via the .conf's LPGROUPS, cross-checked with the
  payload size and the payload's model id).
* :func:`read_vt_csv` reads the decoded ``vt-router.csv[.gz]``, ``vt-terminal.csv[.gz]``, ``vt-nwlp.csv[.gz]``
  (both nw-lp layouts found in the reference data are accepted and renamed to the struct's C names).

:func:`router_port_samples` turns the router table into the dense :class:`hybridsim_common.records.PortSamples` block
(``PORT_FEATURES``: bytes = link_traffic, busy_ns = busy_time, util_pct from the port class bandwidth, stalled =
stalled_chunks, vc_occ = vc_occupancy_sum, queued = queued_count).

``real_time`` (uninitialised memory in ROSS) and ``gvt`` are never read.
"""

from __future__ import annotations

import os
import re
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

from hybridsim_common.records import PORT_FEATURES, PortSamples
from hybridsim_common.topology import GLOBAL, LOCAL, TERMINAL, DragonflyShape
from hybridsim_common.units import GIB

from .common import CodesParseError, find_file, read_bytes, warn

HEADER = struct.Struct("<QQQddii")
HEADER_SIZE = 48
NWLP_SIZE = 104
ROUTER_LP = "modelnet_dragonfly_dally_router"
TERMINAL_LP = "modelnet_dragonfly_dally"
NWLP_LP = "nw-lp"

NWLP_FIELDS = ("nw_id", "app_id", "local_rank", "num_sends", "num_recvs", "num_bytes_sent", "num_bytes_recvd",
               "send_time", "recv_time", "wait_time", "compute_time", "comm_time", "max_time", "avg_msg_time")
#: the alternative nw-lp CSV layout (ross-stats-decoded/vt-nwlp.csv.gz of the reference runs)
_NWLP_RENAME = {"ts_ns": "ts", "bytes_sent": "num_bytes_sent", "bytes_recvd": "num_bytes_recvd",
                "send_time_ns": "send_time", "recv_time_ns": "recv_time", "wait_time_ns": "wait_time",
                "compute_time_ns": "compute_time", "comm_time_ns": "comm_time", "max_time_ns": "max_time",
                "avg_msg_time_ns": "avg_msg_time"}


def router_sample_size(radix: int) -> int:
    return 72 + 32 * radix


def terminal_sample_size(rails: int = 1, qos: int = 1) -> int:
    return 128 + 16 * rails + 8 * rails * qos


def _hdr_fields():
    return [("lpid", "<u8"), ("kpid", "<u8"), ("peid", "<u8"), ("ts", "<f8"), ("real_time", "<f8"),
            ("sample_sz", "<i4"), ("flag", "<i4")]


def router_dtype(radix: int) -> np.dtype:
    f = _hdr_fields() + [("router_id", "<u8"), ("end_time", "<f8"), ("fwd_events", "<i8"), ("rev_events", "<i8"),
                         ("_ptr", "V40"), ("busy_time", "<f8", (radix,)), ("link_traffic", "<i8", (radix,)),
                         ("stalled_chunks", "<u8", (radix,)), ("vc_occupancy_sum", "<i4", (radix,)),
                         ("queued_count", "<i4", (radix,))]
    dt = np.dtype(f)
    assert dt.itemsize == HEADER_SIZE + router_sample_size(radix)
    return dt


def terminal_dtype(rails: int = 1, qos: int = 1) -> np.dtype:
    f = _hdr_fields() + [("terminal_id", "<u8"), ("fin_chunks", "<i8"), ("data_size", "<i8"), ("fin_hops", "<f8"),
                         ("fin_chunks_time", "<f8"), ("packets_gen", "<i8"), ("packets_fin", "<i8"),
                         ("min_fin", "<i8"), ("nonmin_fin", "<i8"), ("end_time", "<f8"), ("fwd_events", "<i8"),
                         ("rev_events", "<i8"), ("_ptr", "V32"), ("busy_time", "<f8", (rails,)),
                         ("stalled_chunks", "<u8", (rails,)), ("vc_occupancy", "<i4", (rails * qos,)),
                         ("terminal_length", "<i4", (rails * qos,))]
    dt = np.dtype(f)
    assert dt.itemsize == HEADER_SIZE + terminal_sample_size(rails, qos)
    return dt


def nwlp_dtype() -> np.dtype:
    f = _hdr_fields() + [("nw_id", "<u8"), ("app_id", "<i4"), ("local_rank", "<i4"), ("num_sends", "<u8"),
                         ("num_recvs", "<u8"), ("num_bytes_sent", "<u8"), ("num_bytes_recvd", "<u8")] + [
        (n, "<f8") for n in NWLP_FIELDS[7:]]
    dt = np.dtype(f)
    assert dt.itemsize == HEADER_SIZE + NWLP_SIZE
    return dt


@dataclass
class VtSamples:
    """Decoded VT samples: ``router`` / ``terminal`` / ``nwlp`` column dicts (None where absent), sorted by
    ``(ts, lpid)``. ``source`` names what they were read from; ``truncated`` is True if the binary ended inside a
    record (a run that died)."""

    router: dict | None = None
    terminal: dict | None = None
    nwlp: dict | None = None
    source: str = ""
    truncated: bool = False
    warnings: list = field(default_factory=list)


def _sorted_cols(cols: dict) -> dict:
    order = np.lexsort((cols["lpid"], cols["ts"]))
    return {k: np.asarray(v)[order] for k, v in cols.items()}


# ----------------------------------------------------------------------------------------------------- binary reader
def read_vt_bin(path: str | os.PathLike, lpid_kind: dict[int, str] | None = None, radix: int | None = None,
                rails: int = 1, qos: int = 1, warnings: list | None = None) -> VtSamples:
    """Decode ``ross-stats-analysis-lps.bin[.gz]``.

    Args:
        lpid_kind: LP type name per global lpid (from :meth:`codes_bridge.conf.CodesConf.lp_layout`); without it the
            kind is inferred from the payload size alone (only safe for the standard dally + mpi-replay sizes).
        radix: router radix (from the .conf); needed to know the router payload size.
    A record with ``flag != 3`` or a size inconsistent with its LP's kind raises :class:`CodesParseError` naming
    the record number and byte offset; a truncated last record is dropped with a warning (``truncated=True``).
    """
    p = Path(path)
    try:
        buf = read_bytes(p)
    except (OSError, EOFError, zlib.error) as exc:
        raise CodesParseError(p, None, f"cannot read: {exc}") from None
    out, _ = decode_vt_bytes(buf, p, lpid_kind, radix, rails, qos, warnings, final=True)
    return out


def decode_vt_bytes(buf: bytes, p, lpid_kind: dict[int, str] | None = None, radix: int | None = None,
                    rails: int = 1, qos: int = 1, warnings: list | None = None, final: bool = True,
                    first_record: int = 0, base_offset: int = 0) -> tuple[VtSamples, int]:
    """Decode the complete records in ``buf``; returns the samples and the number of bytes consumed. With ``final``
    an incomplete trailing record is reported (warning, ``truncated=True``); otherwise it is left for the next call.
    ``first_record`` / ``base_offset`` only number the records in error messages."""
    warnings = [] if warnings is None else warnings
    sizes = {NWLP_SIZE: NWLP_LP, terminal_sample_size(rails, qos): TERMINAL_LP}
    if radix is not None:
        rsz = router_sample_size(radix)
        if rsz in sizes:
            raise CodesParseError(p, None, f"router payload size {rsz} equals another LP kind's size")
        sizes[rsz] = ROUTER_LP
    # walk the framing (sizes are in the headers)
    n = len(buf)
    offs, szs, lps = [], [], []
    pos = 0
    unpack = struct.Struct("<Q32xii").unpack_from
    truncated = False
    while pos < n:
        if pos + HEADER_SIZE > n:
            truncated = True
            break
        lp, sz, flag = unpack(buf, pos)
        if flag != 3 or sz <= 0:
            raise CodesParseError(p, None, f"record {first_record + len(offs)} at byte offset {base_offset + pos}: "
                                           f"bad header (flag {flag}, "
                                           f"sample_sz {sz}); framing lost or not a VT model-stats file")
        if pos + HEADER_SIZE + sz > n:
            truncated = True
            break
        offs.append(pos)
        szs.append(sz)
        lps.append(lp)
        pos += HEADER_SIZE + sz
    if truncated and final:
        warn(f"{p}: ends inside record {first_record + len(offs)} (byte offset {base_offset + pos} of "
             f"{base_offset + n}); the simulator stopped mid-write, the incomplete record is dropped", warnings)
    offs_a = np.asarray(offs, dtype=np.int64)
    szs_a = np.asarray(szs, dtype=np.int64)
    out = VtSamples(source=str(p), truncated=truncated and final, warnings=warnings)
    if lpid_kind is not None and len(offs_a):
        lpids_u = np.asarray(lps, dtype=np.uint64)
        n_lp = max(lpid_kind) + 1
        bad = np.nonzero(lpids_u >= n_lp)[0]
        if len(bad):
            i = int(bad[0])
            raise CodesParseError(p, None, f"record {first_record + i} at byte offset {base_offset + offs_a[i]}: "
                                           f"lpid {int(lpids_u[i])} is not one of the .conf's {n_lp} LPs "
                                           f"(corrupt header)")
        lpids = lpids_u.astype(np.int64)
        names = sorted(set(lpid_kind.values())) + ["?"]
        table = np.full(n_lp, len(names) - 1, dtype=np.int64)
        for lp, kname in lpid_kind.items():
            table[lp] = names.index(kname)
        kinds = np.array(names)[table[lpids]]
    else:
        lpids = None
        kinds = None
    for sz in np.unique(szs_a):
        sel = np.nonzero(szs_a == sz)[0]
        kind = sizes.get(int(sz))
        if kinds is not None:
            ks = set(kinds[sel].tolist())
            if len(ks) != 1 or (kind is not None and ks != {kind}):
                i = sel[0] if kind is None else sel[np.nonzero(kinds[sel] != kind)[0][0]] if (kinds[sel] != kind).any() else sel[0]
                raise CodesParseError(p, None, f"record {i} at byte offset {offs_a[i]}: lpid {lpids[i]} is a "
                                               f"{kinds[i]!r} LP but has payload size {sz} (expected kind {kind!r}; "
                                               f"check radix/rails/qos against the .conf)")
            kind = ks.pop()
            if kind == ROUTER_LP and radix is None and (sz - 72) % 32 == 0:
                radix = (int(sz) - 72) // 32
        if kind is None:
            if radix is None and (sz - 72) % 32 == 0 and sz != NWLP_SIZE:
                kind, radix = ROUTER_LP, (int(sz) - 72) // 32
            else:
                raise CodesParseError(p, None, f"record {sel[0]} at byte offset {offs_a[sel[0]]}: payload size {sz} "
                                               f"matches no LP kind (router radix {radix}, rails {rails}, qos {qos})")
        dt = {ROUTER_LP: lambda: router_dtype(radix), TERMINAL_LP: lambda: terminal_dtype(rails, qos),
              NWLP_LP: nwlp_dtype}[kind]()
        if dt.itemsize != HEADER_SIZE + sz:
            raise CodesParseError(p, None, f"record {sel[0]}: {kind} payload size {sz} != expected "
                                           f"{dt.itemsize - HEADER_SIZE}")
        rec = _gather(buf, offs_a[sel], dt)
        if lpid_kind is not None:
            _check_ids(rec, kind, lpid_kind, p, first_record + sel, base_offset + offs_a[sel])
        cols = _flatten(rec, kind)
        cols = _sorted_cols(cols)
        if kind == ROUTER_LP:
            out.router = cols
        elif kind == TERMINAL_LP:
            out.terminal = cols
        else:
            out.nwlp = cols
    return out, pos


#: the id field each LP kind's payload repeats (its index among the LPs of its kind, in lpid order)
_ID_FIELD = {ROUTER_LP: "router_id", TERMINAL_LP: "terminal_id", NWLP_LP: "nw_id"}


def _check_ids(rec: np.ndarray, kind: str, lpid_kind: dict[int, str], p, records: np.ndarray,
               offsets: np.ndarray) -> None:
    """What a record says twice must agree, else it is damaged: its payload id is its LP's index among the .conf's
    LPs of that kind (the header's lpid says which LP wrote it), and a router's or terminal's ``end_time`` is the
    header's sample time."""
    same = np.array(sorted(lp for lp, k in lpid_kind.items() if k == kind), dtype=np.int64)
    lpid = rec["lpid"].astype(np.int64)
    expect = np.searchsorted(same, lpid)
    bad = np.flatnonzero(rec[_ID_FIELD[kind]].astype(np.int64) != expect)
    where = lambda i: f"record {int(records[i])} at byte offset {int(offsets[i])}"  # noqa: E731
    if len(bad):
        i = int(bad[0])
        raise CodesParseError(p, None, f"{where(i)}: {_ID_FIELD[kind]} {int(rec[_ID_FIELD[kind]][i])}, but lpid "
                                       f"{int(lpid[i])} is {kind} {int(expect[i])} (damaged record)")
    if "end_time" in rec.dtype.names:
        bad = np.flatnonzero(rec["end_time"] != rec["ts"])
        if len(bad):
            i = int(bad[0])
            raise CodesParseError(p, None, f"{where(i)}: end_time {float(rec['end_time'][i])!r} differs from the "
                                           f"sample time {float(rec['ts'][i])!r} (damaged record)")


def _gather(buf: bytes, offsets: np.ndarray, dt: np.dtype, chunk: int = 8192) -> np.ndarray:
    """Copy the fixed-size records at ``offsets`` into one structured array (chunked fancy indexing)."""
    raw = np.frombuffer(buf, dtype=np.uint8)
    out = np.empty(len(offsets), dtype=dt)
    flat = out.view(np.uint8).reshape(len(offsets), dt.itemsize)
    col = np.arange(dt.itemsize, dtype=np.int64)
    for i in range(0, len(offsets), chunk):
        o = offsets[i:i + chunk]
        flat[i:i + len(o)] = raw[o[:, None] + col[None, :]]
    return out


def _flatten(rec: np.ndarray, kind: str) -> dict:
    """Structured records -> CODES-CSV-named columns."""
    cols: dict = {"ts": rec["ts"].copy(), "peid": rec["peid"].astype(np.int64), "kpid": rec["kpid"].astype(np.int64),
                  "lpid": rec["lpid"].astype(np.int64)}
    if kind == ROUTER_LP:
        cols["router_id"] = rec["router_id"].astype(np.int64)
        for n in ("end_time", "fwd_events", "rev_events"):
            cols[n] = rec[n].copy()
        for src, dst in (("busy_time", "busy_time_ns"), ("link_traffic", "link_traffic"),
                         ("stalled_chunks", "stalled_chunks"), ("vc_occupancy_sum", "vc_occupancy_sum"),
                         ("queued_count", "queued_count")):
            a = rec[src]
            for k in range(a.shape[1]):
                cols[f"{dst}_p{k}"] = a[:, k].copy()
    elif kind == TERMINAL_LP:
        cols["terminal_id"] = rec["terminal_id"].astype(np.int64)
        for n in ("fin_chunks", "data_size", "fin_hops"):
            cols[n] = rec[n].copy()
        cols["fin_chunks_time_ns"] = rec["fin_chunks_time"].copy()
        for n in ("packets_gen", "packets_fin", "min_fin", "nonmin_fin", "end_time", "fwd_events", "rev_events"):
            cols[n] = rec[n].copy()
        R = rec["busy_time"].shape[1]
        RQ = rec["vc_occupancy"].shape[1]
        Q = RQ // R
        for r in range(R):
            cols[f"busy_time_ns_r{r}"] = rec["busy_time"][:, r].copy()
            cols[f"stalled_chunks_r{r}"] = rec["stalled_chunks"][:, r].copy()
        for r in range(R):
            for q in range(Q):
                cols[f"vc_occupancy_r{r}q{q}"] = rec["vc_occupancy"][:, r * Q + q].copy()
        for r in range(R):
            for q in range(Q):
                cols[f"terminal_length_r{r}q{q}"] = rec["terminal_length"][:, r * Q + q].copy()
    else:
        for n in NWLP_FIELDS:
            cols[n] = rec[n].copy()
        cols["nw_id"] = cols["nw_id"].astype(np.int64)
    return cols


class VtBinTail:
    """Decode ``ross-stats-analysis-lps.bin`` while ROSS is still writing it: :meth:`poll` returns the complete
    records appended since the last call (a :class:`VtSamples`, or None if there are none) and keeps a partial
    trailing record for the next call."""

    def __init__(self, path: str | os.PathLike, lpid_kind: dict[int, str] | None = None, radix: int | None = None,
                 rails: int = 1, qos: int = 1):
        self.path = Path(path)
        self.kw = dict(lpid_kind=lpid_kind, radix=radix, rails=rails, qos=qos)
        self._pos = 0
        self._pending = b""
        self.records = 0

    def poll(self) -> VtSamples | None:
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            return None
        if size < self._pos:
            raise CodesParseError(self.path, None, f"file shrank from {self._pos} to {size} bytes while tailing")
        with open(self.path, "rb") as fh:
            fh.seek(self._pos)
            chunk = fh.read(size - self._pos)
        self._pos += len(chunk)
        buf = self._pending + chunk
        base = self._pos - len(buf)
        out, used = decode_vt_bytes(buf, self.path, final=False, first_record=self.records, base_offset=base,
                                    **self.kw)
        self._pending = buf[used:]
        n = sum(len(c["ts"]) for c in (out.router, out.terminal, out.nwlp) if c is not None)
        self.records += n
        return out if n else None

    def finish(self, warnings: list | None = None) -> bool:
        """True (and a warning) if the file ends inside a record."""
        self.poll()
        if self._pending:
            warn(f"{self.path}: ends inside record {self.records} ({len(self._pending)} trailing bytes); the "
                 "simulator stopped mid-write", warnings)
            return True
        return False


# -------------------------------------------------------------------------------------------------------- CSV reader
_INT_COLS = re.compile(r"^(peid|kpid|lpid|router_id|terminal_id|nw_id|app_id|local_rank|fwd_events|rev_events|"
                       r"link_traffic_p\d+|stalled_chunks_\w+|vc_occupancy\w*|queued_count_p\d+|terminal_length\w+|"
                       r"fin_chunks|data_size|packets_gen|packets_fin|min_fin|nonmin_fin|num_\w+|bytes_\w+)$")
_SKIP_COLS = ("real_time", "gvt", "stats_type")


def _read_csv(path: Path) -> dict:
    """Stream a decoded VT CSV into numpy columns (integer counters as int64, times as float64); ``real_time``,
    ``gvt`` and ``stats_type`` are not read. Errors name the file and, where pyarrow knows it, the line."""
    from .common import open_text

    try:
        with open_text(path) as fh:
            header = fh.readline().rstrip("\r\n").split(",")
    except (OSError, EOFError, zlib.error) as exc:
        raise CodesParseError(path, 1, f"cannot read: {exc}") from None
    if len(header) < 2:
        raise CodesParseError(path, 1, "no CSV header")
    keep = [h for h in header if h not in _SKIP_COLS]
    types = {h: (pa.int64() if _INT_COLS.match(h) else pa.float64()) for h in keep}
    bad: list = []

    def on_bad(row):
        bad.append(row)
        return "skip"

    parts: dict[str, list] = {h: [] for h in keep}
    try:
        reader = pacsv.open_csv(
            path, read_options=pacsv.ReadOptions(use_threads=False, block_size=1 << 22),
            parse_options=pacsv.ParseOptions(invalid_row_handler=on_bad),
            convert_options=pacsv.ConvertOptions(include_columns=keep, column_types=types))
        for batch in reader:
            if bad:
                break
            for h in keep:
                parts[h].append(batch.column(h).to_numpy(zero_copy_only=False))
    except (pa.ArrowInvalid, OSError, EOFError, zlib.error) as exc:
        msg = str(exc)
        raise CodesParseError(path, _line_from_arrow(msg),
                              f"malformed or truncated CSV: {msg.splitlines()[0][:200]}") from None
    if bad:
        row = bad[0]
        line = row.number if row.number is not None and row.number >= 0 else None
        raise CodesParseError(path, line, f"expected {row.expected_columns} columns, got {row.actual_columns} "
                                          f"(truncated or malformed line): {row.text[:120]!r}")
    cols = {}
    for h in keep:
        if not parts[h]:
            cols[h] = np.zeros(0, np.int64 if _INT_COLS.match(h) else np.float64)
        else:
            col = np.concatenate(parts[h])
            if np.ma.isMaskedArray(col) or (col.dtype == object):
                raise CodesParseError(path, None, f"column {h!r} has empty values")
            cols[h] = col
        parts[h] = None
    return cols


def _line_from_arrow(msg: str) -> int | None:
    import re

    m = re.search(r"[Rr]ow #?(\d+)", msg)
    return int(m.group(1)) if m else None


def read_vt_csv(decoded_dir: str | os.PathLike, warnings: list | None = None,
                kinds: tuple[str, ...] = ("router", "terminal", "nwlp")) -> VtSamples:
    """Read the CSVs CODES' decoder wrote (``vt-router``, ``vt-terminal``, ``vt-nwlp``; each optional, ``.gz``
    or not). ``kinds`` limits which are read (the big terminal / nw-lp files are not needed for port samples)."""
    d = Path(decoded_dir)
    out = VtSamples(source=str(d), warnings=[] if warnings is None else warnings)
    for attr, name in (("router", "vt-router.csv"), ("terminal", "vt-terminal.csv"), ("nwlp", "vt-nwlp.csv")):
        if attr not in kinds:
            continue
        p = find_file(d / name)
        if p is None:
            continue
        cols = _read_csv(p)
        if attr == "nwlp":
            cols = {_NWLP_RENAME.get(k, k): v for k, v in cols.items()}
        for need in ("ts", "lpid"):
            if need not in cols:
                raise CodesParseError(p, 1, f"header lacks column {need!r}")
        setattr(out, attr, _sorted_cols(cols))
    return out


# ---------------------------------------------------------------------------------------------- router -> PortSamples
def port_classes(shape: DragonflyShape) -> np.ndarray:
    a, h, p = shape.routers_per_group, shape.global_channels_per_router, shape.terminals_per_router
    return np.array([LOCAL] * (a - 1) + [GLOBAL] * h + [TERMINAL] * p, dtype=np.int8)


def router_port_samples(router: dict, shape: DragonflyShape, bandwidth_gib: tuple[float, float, float],
                        interval: float | None = None, source: str = "vt-router",
                        warnings: list | None = None) -> PortSamples:
    """Dense ``(samples, routers*radix, PORT_FEATURES)`` block from a router column dict.

    ``interval`` defaults to the spacing of the sample times. Missing (router, ts) rows -- records a parallel run
    dropped -- are NaN and reported in a warning; ``meta['missing_rows']`` counts them.
    """
    radix = shape.radix
    n_routers = shape.groups * shape.routers_per_group
    ts = np.asarray(router["ts"], dtype=np.float64)
    rid = np.asarray(router["router_id"], dtype=np.int64)
    if len(ts) == 0:
        raise CodesParseError(source, None, "no router samples")
    for k in range(radix):
        if f"link_traffic_p{k}" not in router:
            raise CodesParseError(source, None, f"router samples lack port {k} (radix {radix} from the .conf)")
    if f"link_traffic_p{radix}" in router:
        raise CodesParseError(source, None, f"router samples have more than {radix} ports (radix from the .conf)")
    if rid.min() < 0 or rid.max() >= n_routers:
        raise CodesParseError(source, None, f"router_id {rid.max()} outside 0..{n_routers - 1}")
    if not np.isfinite(ts).all() or (ts <= 0).any():
        i = int(np.flatnonzero(~np.isfinite(ts) | (ts <= 0))[0])
        raise CodesParseError(source, None, f"router {rid[i]}: sample time {float(ts[i])!r} (damaged record)")
    if interval is not None:  # ROSS samples at multiples of --vt-interval
        k = ts / float(interval)
        off = np.flatnonzero(np.abs(k - np.round(k)) > 1e-6 * np.maximum(1.0, k))
        if len(off):
            i = int(off[0])
            raise CodesParseError(source, None, f"router {rid[i]}: sample time {float(ts[i])!r} is not a multiple of "
                                                f"--vt-interval {interval:g} (damaged record)")
    times, t_idx = np.unique(ts, return_inverse=True)
    if interval is None:
        d = np.diff(times)
        interval = float(np.min(d)) if len(d) else float(times[0])
    S = len(times)
    key = t_idx * n_routers + rid
    if len(np.unique(key)) != len(key):
        raise CodesParseError(source, None, "duplicate (ts, router_id) samples")
    F = len(PORT_FEATURES)
    values = np.full((S, n_routers, radix, F), np.nan, dtype=np.float32)
    cls = port_classes(shape)
    bw_bytes_per_ns = np.array(bandwidth_gib, dtype=np.float64)[cls] * GIB / 1e9  # per port index
    traffic = np.stack([np.asarray(router[f"link_traffic_p{k}"], np.float64) for k in range(radix)], axis=1)
    busy = np.stack([np.asarray(router[f"busy_time_ns_p{k}"], np.float64) for k in range(radix)], axis=1)
    stalled = np.stack([np.asarray(router[f"stalled_chunks_p{k}"], np.float64) for k in range(radix)], axis=1)
    vcocc = np.stack([np.asarray(router[f"vc_occupancy_sum_p{k}"], np.float64) for k in range(radix)], axis=1)
    queued = np.stack([np.asarray(router[f"queued_count_p{k}"], np.float64) for k in range(radix)], axis=1)
    _check_port_values(source, ts, rid, float(interval), bw_bytes_per_ns, traffic=traffic, busy=busy,
                       stalled=stalled, vcocc=vcocc, queued=queued)
    util = traffic / (bw_bytes_per_ns[None, :] * interval) * 100.0
    block = np.stack([traffic, busy, util, stalled, vcocc, queued], axis=2)  # (rows, radix, F)
    values[t_idx, rid] = block.astype(np.float32)
    missing = S * n_routers - len(ts)
    if missing:
        warn(f"{source}: {missing} of {S * n_routers} (sample, router) rows are missing (dropped by ROSS' "
             f"per-PE stats buffer in parallel runs, or routers never sampled); they are NaN in ports", warnings)
    return PortSamples(times, float(interval), radix, PORT_FEATURES, values.reshape(S, n_routers * radix, F),
                       meta={"source": source, "missing_rows": int(missing)})


#: most bytes a port may report in one sample window, in windows' worth of its bandwidth (the reference runs reach
#: 1.01: CODES counts a packet in the window it starts in)
MAX_UTILISATION = 2.0


def _check_port_values(source, ts, rid, interval: float, bw_bytes_per_ns, **fields) -> None:
    """Refuse router samples no simulation can produce -- what a damaged file (a flipped byte in a counter's high
    bytes, a sign, an exponent) gives, while the reference runs all pass: counts and times must be finite and
    >= 0; a port's bytes at most :data:`MAX_UTILISATION` windows of its bandwidth; its busy time at most the
    simulated time so far (optimistic runs report more than one window); stalled chunks at most one per ns."""
    limits = {"traffic": (bw_bytes_per_ns[None, :] * interval * MAX_UTILISATION, "bytes, more than the port can "
                                                                                 "carry in a window"),
              "busy": (np.asarray(ts, np.float64)[:, None] * (1 + 1e-9), "ns, longer than the simulation so far"),
              "stalled": (np.full((1, 1), interval), "stalled chunks, more than one per ns of the window")}
    names = {"traffic": "link_traffic", "busy": "busy_time", "stalled": "stalled_chunks",
             "vcocc": "vc_occupancy_sum", "queued": "queued_count"}
    for key, a in fields.items():
        bad = ~np.isfinite(a) | (a < 0)
        why = "not a finite count >= 0"
        if key in limits:
            over = a > limits[key][0]
            if over.any() and not bad.any():
                bad, why = over, limits[key][1]
        if bad.any():
            r, k = (int(x[0]) for x in np.nonzero(bad))
            raise CodesParseError(source, None, f"router {rid[r]} at ts {ts[r]:g}, port {k}: {names[key]} "
                                                f"{a[r, k]:g} is impossible ({why}; damaged record)")
