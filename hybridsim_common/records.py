"""Records every backend emits and every consumer reads.

Two kinds of record flow from a backend (embedded engine or CODES import) to the surrogate and the controller:

* :class:`IterationRecord` -- one rank of one job finished one iteration. ``start`` and ``end`` are virtual times in
  **nanoseconds**; ``end - start`` is the iteration time the surrogate predicts.
* port samples -- every ``sampling.interval`` of virtual time, one row per router port with the features named in
  :data:`PORT_FEATURES` (and optionally per-VC extras). They are held as a dense block :class:`PortSamples`
  (``values[sample, port, feature]``) because the surrogate consumes them as tensors.

A run's records are held as columns (:class:`IterationColumns`: one array a field, the embedded engine's native core
hands its predicted iterations over as arrays), read as :class:`IterationRecord` objects only where someone reads
them one by one; tables and summaries read the columns.

On disk (a run directory, see :mod:`hybridsim_common.rundir`) they are ``iterations.parquet`` and ``ports.parquet`` (long
format: one row per (sample, port)). Both are written by the functions here and nowhere else, so the two backends
cannot drift apart. Job streams (a ``scheduler`` section) add ``jobs.parquet``: one row per job with its arrival,
start, end, wait, run time, bounded slowdown, allocated terminals, whether it was killed at its walltime and its SWF
job number (:func:`write_jobs`).

Port ids: the global port id of router ``r``, port ``k`` is ``r * radix + k`` (CODES dragonfly-dally numbering of
``k``: local ports, then global, then terminal).
"""

from __future__ import annotations

import os
from array import array
from collections.abc import Sequence as _Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

#: Core per-port features over one sampling window, present for both backends.
#:   bytes     -- bytes sent out of the port in the window
#:   busy_ns   -- ns the port spent blocked waiting for credits in the window
#:   util_pct  -- bytes / (link bandwidth x window) x 100
#:   stalled   -- chunks that found the downstream (port, VC) buffer full in the window
#:   vc_occ    -- bytes held in the port's VC buffers (sum over VCs) at the end of the window (snapshot)
#:   queued    -- bytes waiting in the port's overflow queue at the end of the window (snapshot)
PORT_FEATURES: tuple[str, ...] = ("bytes", "busy_ns", "util_pct", "stalled", "vc_occ", "queued")

ITERATION_COLUMNS = ("job", "job_id", "rank", "iteration", "start", "end")


@dataclass(frozen=True, slots=True)
class IterationRecord:
    """Rank ``rank`` of job ``job`` ran iteration ``iteration`` from ``start`` to ``end`` (virtual ns)."""

    job: str
    job_id: int
    rank: int
    iteration: int
    start: float
    end: float

    @property
    def duration(self) -> float:
        return self.end - self.start


#: the fields of :class:`IterationRecord` an :class:`IterationColumns` keeps as arrays, with their array codes
#: (``job`` is ``names[job_id]``); ``simulated`` beside them
_COLUMN_CODES = (("job_id", "i"), ("rank", "i"), ("iteration", "i"), ("start", "d"), ("end", "d"))


class IterationColumns(_Sequence):
    """A run's iteration records in event order, held as columns: ``job_id``, ``rank``, ``iteration`` (int32),
    ``start``, ``end`` (float64) and whether each was ``simulated``, ``names[job_id]`` the job's name. A record
    costs 29 bytes and no Python object; read one by one (``records[i]``, iteration) it is an :class:`IterationRecord`
    made then, equal to the one a backend would have made. Tables read :meth:`columns` (:func:`iterations_to_table`,
    the run's summaries, ``hybridsim bench``).

    Filled one record at a time (:meth:`append`, a simulated iteration) or a block at a time (:meth:`extend`: the
    native core's columns of predicted iterations, or records). :attr:`simulated` is the flags as a sequence of
    bools."""

    def __init__(self, names: Sequence[str]):
        self.names = list(names)
        self._bufs = tuple(array(code) for _, code in _COLUMN_CODES)
        self._sim = array("b")
        self._cols: dict[str, np.ndarray] | None = None
        #: the bound ``append`` of each column buffer, for :meth:`append` (once per simulated rank-iteration)
        self._app = tuple(b.append for b in self._bufs) + (self._sim.append,)
        self.simulated = _Flags(self._sim)

    def __len__(self) -> int:
        return len(self._sim)

    def append(self, job_id: int, rank: int, iteration: int, start: float, end: float, simulated: bool) -> None:
        """One record at the end."""
        a_job, a_rank, a_it, a_start, a_end, a_sim = self._app
        a_job(job_id)
        a_rank(rank)
        a_it(iteration)
        a_start(start)
        a_end(end)
        a_sim(simulated)
        self._cols = None

    def extend(self, records, simulated: bool) -> None:
        """A block at the end, all ``simulated`` or all not: ``(job_ids, ranks, iterations, starts, ends)`` arrays
        (the native core's) or :class:`IterationRecord` s."""
        if isinstance(records, tuple) and len(records) == len(_COLUMN_CODES) and isinstance(records[0], np.ndarray):
            n = len(records[0])
            for buf, (_, code), col in zip(self._bufs, _COLUMN_CODES, records):
                buf.frombytes(np.ascontiguousarray(col, dtype=np.int32 if code == "i" else np.float64).tobytes())
            self._sim.frombytes(bytes([bool(simulated)]) * n)
        else:
            for r in records:
                self.append(r.job_id, r.rank, r.iteration, r.start, r.end, simulated)
        self._cols = None

    def columns(self) -> dict[str, np.ndarray]:
        """``{"job_id", "rank", "iteration", "start", "end", "simulated"}``: the columns as numpy arrays (copies, made
        once until the next record; read-only)."""
        if self._cols is None:
            cols = {name: np.array(buf, dtype=np.int32 if code == "i" else np.float64)
                    for (name, code), buf in zip(_COLUMN_CODES, self._bufs)}
            cols["simulated"] = np.array(self._sim, dtype=np.bool_)
            for c in cols.values():
                c.flags.writeable = False
            self._cols = cols
        return self._cols

    def _record(self, i: int) -> IterationRecord:
        j, r, it, s, e = (b[i] for b in self._bufs)
        return IterationRecord(self.names[j], j, r, it, s, e)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self._record(k) for k in range(*i.indices(len(self)))]
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"record {i} of {n}")
        return self._record(i)

    def __iter__(self):
        names = self.names
        for j, r, it, s, e in zip(*self._bufs):
            yield IterationRecord(names[j], j, r, it, s, e)

    def __eq__(self, other) -> bool:
        if isinstance(other, IterationColumns):
            return self.names == other.names and self._bufs == other._bufs and self._sim == other._sim
        return isinstance(other, _Sequence) and len(other) == len(self) and all(a == b for a, b in zip(self, other))

    __hash__ = None

    def __repr__(self) -> str:
        return f"IterationColumns({len(self)} records)"


class RecordBlock(_Sequence):
    """A block of records handed over as columns ``(job ids, ranks, iterations, starts, ends)`` (the native core's
    burst of predicted iterations), read as :class:`IterationRecord` s only where someone reads them (what
    :meth:`hybridsim_common.backend.Director.on_records` gets: a director that takes the burst's spans reads none)."""

    __slots__ = ("names", "cols")

    def __init__(self, names: Sequence[str], cols: tuple):
        self.names, self.cols = names, cols

    def __len__(self) -> int:
        return len(self.cols[0])

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        j, r, it, s, e = (c[i].item() for c in self.cols)
        return IterationRecord(self.names[j], j, r, it, s, e)

    def __iter__(self):
        names = self.names
        for j, r, it, s, e in zip(*(c.tolist() for c in self.cols)):
            yield IterationRecord(names[j], j, r, it, s, e)


class _Flags(_Sequence):
    """The ``simulated`` flags of an :class:`IterationColumns`, as bools (equal to a list of the same bools)."""

    def __init__(self, buf: array):
        self._buf = buf

    def __len__(self) -> int:
        return len(self._buf)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [bool(v) for v in self._buf[i]]
        return bool(self._buf[i])

    def __iter__(self):
        return map(bool, self._buf)

    def __eq__(self, other) -> bool:
        return isinstance(other, _Sequence) and len(other) == len(self) and all(a == b for a, b in zip(self, other))

    __hash__ = None

    def __repr__(self) -> str:
        return f"flags({list(self)!r})"


@dataclass
class PortSamples:
    """Dense block of port samples.

    Attributes:
        t_end: ``(S,)`` float64, virtual time (ns) at which each sampling window ends.
        interval: window length in ns.
        radix: ports per router; port id = router * radix + port.
        features: names of the feature axis, starting with :data:`PORT_FEATURES` where available.
        values: ``(S, P, F)`` float32.
    """

    t_end: np.ndarray
    interval: float
    radix: int
    features: tuple[str, ...]
    values: np.ndarray
    meta: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.t_end = np.asarray(self.t_end, dtype=np.float64)
        self.values = np.asarray(self.values, dtype=np.float32)
        if self.values.ndim != 3:
            raise ValueError(f"PortSamples.values must be (samples, ports, features), got shape {self.values.shape}")
        if self.values.shape[0] != self.t_end.shape[0]:
            raise ValueError("PortSamples: t_end and values disagree on the number of samples")
        if self.values.shape[2] != len(self.features):
            raise ValueError("PortSamples: features and values disagree on the number of features")
        if self.values.shape[1] % self.radix:
            raise ValueError("PortSamples: number of ports is not a multiple of the radix")

    @property
    def n_ports(self) -> int:
        return self.values.shape[1]

    def feature(self, name: str) -> np.ndarray:
        """``(S, P)`` view of one feature."""
        return self.values[:, :, self.features.index(name)]


# --------------------------------------------------------------------------------------------------------------------
# iterations.parquet


def iterations_to_table(records: Iterable[IterationRecord] | Sequence[IterationRecord]) -> pa.Table:
    if isinstance(records, IterationColumns):
        c = records.columns()
        names = np.array(records.names + [""], dtype=object)   # (a str array of any length, none of them empty)
        return pa.table(
            {
                "job": pa.array(names[c["job_id"]], pa.string()),
                "job_id": pa.array(c["job_id"], pa.int32()),
                "rank": pa.array(c["rank"], pa.int32()),
                "iteration": pa.array(c["iteration"], pa.int32()),
                "start": pa.array(c["start"], pa.float64()),
                "end": pa.array(c["end"], pa.float64()),
            }
        )
    recs = list(records)
    return pa.table(
        {
            "job": pa.array([r.job for r in recs], pa.string()),
            "job_id": pa.array([r.job_id for r in recs], pa.int32()),
            "rank": pa.array([r.rank for r in recs], pa.int32()),
            "iteration": pa.array([r.iteration for r in recs], pa.int32()),
            "start": pa.array([r.start for r in recs], pa.float64()),
            "end": pa.array([r.end for r in recs], pa.float64()),
        }
    )


def sort_iterations(table: pa.Table) -> pa.Table:
    """Deterministic order: job id, rank, iteration."""
    return table.sort_by([("job_id", "ascending"), ("rank", "ascending"), ("iteration", "ascending")])


def write_table_atomic(table: pa.Table, path: str | os.PathLike) -> None:
    """Write a Parquet file so that a reader never sees a half-written one (temp file + rename).

    Written without statistics timestamps or other run-dependent metadata so that the same data gives the same bytes.
    """
    path = Path(path)
    tmp = path.with_name(path.name + ".partial")
    pq.write_table(table, tmp, compression="zstd", write_statistics=True, store_schema=True)
    os.replace(tmp, path)


def write_iterations(records, path: str | os.PathLike, extra: dict[str, Sequence] | None = None) -> None:
    """Write iteration records (plus optional extra columns of equal length, e.g. mode/prediction)."""
    table = records if isinstance(records, pa.Table) else iterations_to_table(records)
    if extra:
        for name, col in extra.items():
            table = table.append_column(name, pa.array(col))
    write_table_atomic(sort_iterations(table), path)


def _read_checked(path: str | os.PathLike, columns: Sequence[str], what: str) -> pa.Table:
    """A parquet table that must have ``columns`` (ValueError naming the file and the missing ones)."""
    table = pq.read_table(path)
    missing = [c for c in columns if c not in table.column_names]
    if missing:
        raise ValueError(f"{path}: not {what}, missing columns {missing}")
    return table


def read_iterations(path: str | os.PathLike) -> pa.Table:
    return _read_checked(path, ITERATION_COLUMNS, "an iterations table")


def records_from_table(table: pa.Table) -> IterationColumns:
    """The records of an iterations table, in its row order, as :class:`IterationColumns` (every row simulated: a
    table keeps no flags of its own)."""
    job = table.column("job").to_pylist()
    job_id = table.column("job_id").to_numpy().astype(np.int32)
    names: list[str] = []
    for k, n in zip(job_id.tolist(), job):   # job id -> name as the table says (ids without rows: a placeholder)
        while len(names) <= k:
            names.append("")
        names[k] = n
    out = IterationColumns(names)
    cols = tuple(np.asarray(table.column(c).to_numpy(), dtype=np.int32 if code == "i" else np.float64)
                 for c, code in _COLUMN_CODES)
    out.extend(cols, True)
    return out


# --------------------------------------------------------------------------------------------------------------------
# jobs.parquet (job streams)

JOB_COLUMNS = ("job", "job_id", "size", "arrival", "walltime", "start", "end", "wait", "run_time",
               "bounded_slowdown", "terminals")
#: columns added later (a run written before them still reads): ``killed`` (ended at its walltime) and ``swf_id``
#: (the job's number in the SWF trace its scenario was mapped from; null for other jobs)
JOB_COLUMNS_LATER = ("killed", "swf_id")


def jobs_to_table(names: Sequence[str], outcomes, tau: float, swf_ids: Sequence[int | None] | None = None
                  ) -> pa.Table:
    """One row per :class:`hybridsim.scheduler.JobOutcome` (``job_id`` = scenario job index, ``names[job_id]`` its
    name, ``swf_ids[job_id]`` its SWF job number or None), bounded slowdown with floor ``tau``; times in ns."""
    rows = [o.row(tau) for o in outcomes]
    cols = {
        "job": pa.array([names[r["job"]] for r in rows], pa.string()),
        "job_id": pa.array([r["job"] for r in rows], pa.int32()),
        "size": pa.array([r["size"] for r in rows], pa.int32()),
        "arrival": pa.array([float(o.arrival) for o in outcomes], pa.float64()),
        "walltime": pa.array([float(o.walltime) for o in outcomes], pa.float64()),
    }
    for c in ("start", "end", "wait", "run_time", "bounded_slowdown"):
        cols[c] = pa.array([float(r[c]) for r in rows], pa.float64())
    cols["terminals"] = pa.array([r["terminals"] for r in rows], pa.list_(pa.int64()))
    cols["killed"] = pa.array([bool(getattr(o, "killed", False)) for o in outcomes], pa.bool_())
    cols["swf_id"] = pa.array([None if swf_ids is None else swf_ids[r["job"]] for r in rows], pa.int64())
    return pa.table(cols).sort_by([("job_id", "ascending")])


def write_jobs(names: Sequence[str], outcomes, tau: float, path: str | os.PathLike,
               swf_ids: Sequence[int | None] | None = None) -> None:
    write_table_atomic(jobs_to_table(names, outcomes, tau, swf_ids), path)


def read_jobs(path: str | os.PathLike) -> pa.Table:
    return _read_checked(path, JOB_COLUMNS, "a jobs table")


# --------------------------------------------------------------------------------------------------------------------
# ports.parquet


def ports_to_table(samples: PortSamples) -> pa.Table:
    S, P, F = samples.values.shape
    radix = samples.radix
    port_ids = np.arange(P, dtype=np.int32)
    cols: dict[str, pa.Array] = {
        "t_end": pa.array(np.repeat(samples.t_end, P)),
        "router": pa.array(np.tile(port_ids // radix, S)),
        "port": pa.array(np.tile(port_ids % radix, S)),
    }
    flat = samples.values.reshape(S * P, F)
    for k, name in enumerate(samples.features):
        cols[name] = pa.array(np.ascontiguousarray(flat[:, k]))
    meta = {b"hybridsim.interval": str(float(samples.interval)).encode(), b"hybridsim.radix": str(radix).encode()}
    return pa.table(cols).replace_schema_metadata(meta)


def write_ports(samples: PortSamples, path: str | os.PathLike) -> None:
    write_table_atomic(ports_to_table(samples), path)


def read_ports(path: str | os.PathLike) -> PortSamples:
    """Read ``ports.parquet`` back into a dense :class:`PortSamples` block."""
    table = pq.read_table(path)
    meta = table.schema.metadata or {}
    for c in ("t_end", "router", "port"):
        if c not in table.column_names:
            raise ValueError(f"{path}: not a ports table, missing column {c!r}")
    try:
        radix = int(meta[b"hybridsim.radix"])
        interval = float(meta[b"hybridsim.interval"])
    except KeyError as exc:
        raise ValueError(f"{path}: ports table lacks hybridsim metadata {exc}") from None
    t = table.column("t_end").to_numpy()
    router = table.column("router").to_numpy().astype(np.int64)
    port = table.column("port").to_numpy().astype(np.int64)
    features = tuple(c for c in table.column_names if c not in ("t_end", "router", "port"))
    times, t_idx = np.unique(t, return_inverse=True)
    pid = router * radix + port
    n_ports = int(pid.max()) + 1 if len(pid) else 0
    n_ports = -(-n_ports // radix) * radix
    values = np.zeros((len(times), n_ports, len(features)), dtype=np.float32)
    for k, name in enumerate(features):
        values[t_idx, pid, k] = table.column(name).to_numpy()
    return PortSamples(times, interval, radix, features, values)
