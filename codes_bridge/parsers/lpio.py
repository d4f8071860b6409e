"""``lp-io/`` files of a CODES dragonfly-dally + model-net-mpi-replay run (docs/codes-formats.md §3).

End-of-run totals: :func:`parse_link_stats` (``dragonfly-link-stats``), :func:`parse_cn_stats`
(``dragonfly-cn-stats``), :func:`parse_mpi_replay_stats` (``mpi-replay-stats``). Windowed:
:func:`parse_router_traffic_sample` (``dragonfly-router-traffic-sample`` -> PortSamples with bytes/util_pct),
:func:`parse_snapshots` (``dragonfly-snapshots.csv``).

Known CODES output bugs, handled explicitly (docs/codes-formats.md §3):

* ``dragonfly-router-busytime-sample`` is corrupted (``last_buf_full`` zeroed before use, so ``tw_now()`` is added):
  :func:`parse_router_busytime_sample` refuses it (:class:`KnownCodesBug`); :func:`refuse_busytime_sample` records
  the refusal as a warning. Use the ROSS VT samples' busy_time instead.
* The local (``L``) router->router lines of ``dragonfly-link-stats`` index link_traffic by the destination's relative
  router id, not by port (port 0 missing, the first global port printed as local): :func:`parse_link_stats` skips
  them with a warning unless ``keep_local=True`` (then they are returned flagged, for inspection only).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from hybridsim_common.records import PortSamples
from hybridsim_common.topology import DragonflyShape
from hybridsim_common.units import GIB

from .common import CodesParseError, numbered_lines, warn


class KnownCodesBug(CodesParseError):
    """The file is known to be wrong because of a CODES bug; it is refused, not parsed."""


def _rows(path, ncols: int | tuple[int, ...], types, comment: str = "#"):
    """Parse whitespace-separated rows with a fixed column count; errors name file:line."""
    ok = (ncols,) if isinstance(ncols, int) else ncols
    out = []
    for n, line in numbered_lines(path):
        s = line.strip()
        if not s or s.startswith(comment):
            continue
        f = s.split()
        if len(f) not in ok:
            raise CodesParseError(path, n, f"expected {' or '.join(map(str, ok))} fields, got {len(f)} "
                                           f"(truncated or malformed line): {s[:120]!r}")
        try:
            out.append(tuple(t(x) for t, x in zip(types, f)) + tuple(f[len(types):]))
        except ValueError as exc:
            raise CodesParseError(path, n, f"bad value ({exc}): {s[:120]!r}") from None
    return out


# ------------------------------------------------------------------------------------------------- link stats
@dataclass
class LinkStats:
    """Rows of ``dragonfly-link-stats`` (numpy columns). ``link_type`` is ``CN``/``G``/``L``; ``src_type`` and
    ``dst_type`` are ``T``/``R``."""

    src: np.ndarray
    src_type: np.ndarray
    dst: np.ndarray
    dst_type: np.ndarray
    link_type: np.ndarray
    traffic: np.ndarray
    busy: np.ndarray
    stalled: np.ndarray
    local_skipped: int = 0

    def router_port_totals(self, topology) -> dict[str, np.ndarray]:
        """Per router port (``router*radix + port``) totals from the CORRECT lines only: global ports from the G
        lines (matched to ports by destination router through ``topology``, a :class:`hybridsim_common.topology.Dragonfly`
        -- CODES prints them in its own order) and terminal ports from the router->terminal CN lines. Local ports
        are NaN (their lines are buggy)."""
        a, h, p = topology.a, topology.h, topology.p
        radix = topology.radix
        out = {k: np.full(topology.n_ports, np.nan) for k in ("traffic", "busy", "stalled")}
        for i in range(len(self.src)):
            if self.src_type[i] != "R":
                continue
            r = int(self.src[i])
            if self.link_type[i] == "G":
                d = int(self.dst[i])
                ks = [k for k in range(a - 1, a - 1 + h) if topology.peer_router[r * radix + k] == d
                      and np.isnan(out["traffic"][r * radix + k])]
                if not ks:
                    raise ValueError(f"dragonfly-link-stats: G line {r}->{d} matches no (unused) global port of "
                                     f"router {r} in the topology")
                k = ks[0]
            elif self.link_type[i] == "CN":
                t = int(self.dst[i])
                if t // p != r:
                    raise ValueError(f"router {r} lists terminal {t}, which is not attached to it")
                k = a - 1 + h + (t - r * p)
            else:
                continue
            pid = r * radix + k
            out["traffic"][pid] = self.traffic[i]
            out["busy"][pid] = self.busy[i]
            out["stalled"][pid] = self.stalled[i]
        return out


def parse_link_stats(path: str | os.PathLike, warnings: list | None = None, keep_local: bool = False) -> LinkStats:
    rows = _rows(path, 8, (int, str, int, str, str, float, float, float))
    for i, r in enumerate(rows):
        if r[1] not in ("T", "R") or r[3] not in ("T", "R") or r[4] not in ("CN", "G", "L"):
            raise CodesParseError(path, None, f"row {i + 1}: unknown source/destination/link type {r[1:5]}")
    n_local = sum(1 for r in rows if r[4] == "L")
    if n_local and not keep_local:
        warn(f"{path}: skipped {n_local} local (L) router->router lines: CODES indexes their link_traffic by the "
             "destination's relative router id, not by port (known bug, docs/codes-formats.md); use VT port samples",
             warnings)
        rows = [r for r in rows if r[4] != "L"]
    cols = list(zip(*rows)) if rows else [()] * 8
    return LinkStats(np.array(cols[0], np.int64), np.array(cols[1]), np.array(cols[2], np.int64), np.array(cols[3]),
                     np.array(cols[4]), np.array(cols[5], np.float64), np.array(cols[6], np.float64),
                     np.array(cols[7], np.float64), local_skipped=n_local if not keep_local else 0)


# ------------------------------------------------------------------------------------------------- per terminal / rank
CN_STATS_COLUMNS = ("lpid", "terminal_id", "data_sent", "data_received", "avg_packet_latency", "max_packet_latency",
                    "min_packet_latency", "packets_finished", "avg_hops", "avg_busy_time")
MPI_REPLAY_COLUMNS = ("lpid", "nw_id", "job_id", "local_rank", "sends", "recvs", "bytes_sent", "bytes_recvd",
                      "send_time", "comm_time", "compute_time", "avg_msg_time", "max_msg_time")


def _columns(rows, names, int_cols) -> dict[str, np.ndarray]:
    cols = list(zip(*rows)) if rows else [()] * len(names)
    return {n: np.array(c, dtype=np.int64 if n in int_cols else np.float64) for n, c in zip(names, cols)}


def parse_cn_stats(path: str | os.PathLike) -> dict[str, np.ndarray]:
    rows = _rows(path, 10, (int, int) + (float,) * 8)
    return _columns(rows, CN_STATS_COLUMNS, {"lpid", "terminal_id"})


def parse_mpi_replay_stats(path: str | os.PathLike) -> dict[str, np.ndarray]:
    rows = _rows(path, 13, (int, int, int, int) + (float,) * 9)
    return _columns(rows, MPI_REPLAY_COLUMNS, {"lpid", "nw_id", "job_id", "local_rank"})


def parse_model_net_category(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """``model-net-category-*``: ``lp:<gid> key:value ...`` -> columns (``lp`` + every key)."""
    rows = []
    keys = None
    for n, line in numbered_lines(path):
        s = line.strip()
        if not s:
            continue
        try:
            kv = dict(item.split(":", 1) for item in s.split())
            rec = {k: float(v) for k, v in kv.items()}
        except ValueError:
            raise CodesParseError(path, n, f"expected key:value fields: {s[:120]!r}") from None
        if keys is None:
            keys = list(rec)
        elif list(rec) != keys:
            raise CodesParseError(path, n, f"fields {list(rec)} differ from the first line's {keys}")
        rows.append([rec[k] for k in keys])
    if keys is None:
        return {}
    arr = np.array(rows, dtype=np.float64)
    return {k: (arr[:, i].astype(np.int64) if k == "lp" else arr[:, i]) for i, k in enumerate(keys)}


# ------------------------------------------------------------------------------------------------- windowed samples
def parse_router_traffic_sample(path: str | os.PathLike, shape: DragonflyShape,
                                bandwidth_gib: tuple[float, float, float], interval: float | None = None
                                ) -> PortSamples:
    """``dragonfly-router-traffic-sample``: ``<LP ID> <group> <router> <window end ns> <bytes port 0..radix-1>``
    -> PortSamples with features ``("bytes", "util_pct")`` (the other port features are not in this file)."""
    from .ross_vt import port_classes

    radix = shape.radix
    n_routers = shape.groups * shape.routers_per_group
    rows = _rows(path, 4 + radix, (int, int, int, float) + (float,) * radix)
    if not rows:
        raise CodesParseError(path, None, "no samples")
    arr = np.array([r[:4 + radix] for r in rows], dtype=np.float64)
    rid = arr[:, 2].astype(np.int64)
    if rid.min() < 0 or rid.max() >= n_routers:
        raise CodesParseError(path, None, f"router id {rid.max()} outside 0..{n_routers - 1}")
    times, t_idx = np.unique(arr[:, 3], return_inverse=True)
    if interval is None:
        d = np.diff(times)
        interval = float(d.min()) if len(d) else float(times[0])
    traffic = arr[:, 4:]
    bw = np.array(bandwidth_gib, np.float64)[port_classes(shape)] * GIB / 1e9
    util = traffic / (bw[None, :] * interval) * 100.0
    vals = np.full((len(times), n_routers, radix, 2), np.nan, np.float32)
    vals[t_idx, rid, :, 0] = traffic
    vals[t_idx, rid, :, 1] = util
    return PortSamples(times, interval, radix, ("bytes", "util_pct"), vals.reshape(len(times), n_routers * radix, 2),
                       meta={"source": str(path)})


def parse_router_busytime_sample(path: str | os.PathLike, *args, **kwargs):
    """Refused: see the module doc (CODES bug in router_packet_send)."""
    raise KnownCodesBug(path, None, "dragonfly-router-busytime-sample is corrupted by a CODES bug (last_buf_full is "
                                    "zeroed before use, so tw_now() is added; values exceed the window) and is not "
                                    "parsed; the ROSS VT samples carry a correct per-port busy_time")


def refuse_busytime_sample(path: str | os.PathLike, warnings: list | None = None) -> None:
    warn(f"{path}: not used -- corrupted by a known CODES bug (busy time includes tw_now()); per-port busy time "
         "comes only from ROSS VT samples", warnings)


def parse_snapshots(path: str | os.PathLike, radix: int, num_vcs: int | None = None
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``dragonfly-snapshots.csv`` -> ``(times, router_ids, bytes[n, radix, num_vcs])`` sorted by (time, router).
    ``num_vcs`` is taken from the header if not given."""
    rows = []
    header = None
    for n, line in numbered_lines(path):
        s = line.strip()
        if not s:
            continue
        if s.startswith("#"):
            header = [h.strip() for h in s[1:].split(",")]
            continue
        f = [x.strip() for x in s.split(",") if x.strip() != ""]
        if header is not None and len(f) != len(header):
            raise CodesParseError(path, n, f"expected {len(header)} fields, got {len(f)} (truncated or malformed)")
        try:
            rows.append([float(x) for x in f])
        except ValueError:
            raise CodesParseError(path, n, f"non-numeric field in {s[:120]!r}") from None
    if num_vcs is None:
        if header is None:
            raise CodesParseError(path, None, "no header line; pass num_vcs")
        num_vcs = sum(1 for h in header if h.startswith("Port 0 VC"))
    width = 2 + radix * num_vcs
    if rows and len(rows[0]) != width:
        raise CodesParseError(path, None, f"rows have {len(rows[0])} fields, expected {width} "
                                          f"(radix {radix} x {num_vcs} VCs + 2)")
    arr = np.array(rows, dtype=np.float64).reshape(-1, width)
    order = np.lexsort((arr[:, 1], arr[:, 0]))
    arr = arr[order]
    return arr[:, 0], arr[:, 1].astype(np.int64), arr[:, 2:].reshape(-1, radix, num_vcs)
