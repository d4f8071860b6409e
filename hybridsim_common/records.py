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


#: the fields of :class:`IterationRecord` an :class:`IterationColumns` keeps as arrays, with their numpy types
#: (``job`` is ``names[job_id]``); ``simulated`` beside them
_COLUMN_TYPES = (("job_id", np.int32), ("rank", np.int32), ("iteration", np.int32), ("start", np.float64),
                 ("end", np.float64))
_CODES = {np.int32: "i", np.float64: "d"}


class IterationColumns(_Sequence):
    """A run's iteration records in event order, held as columns: ``job_id``, ``rank``, ``iteration`` (int32),
    ``start``, ``end`` (float64) and whether each was ``simulated``, ``names[job_id]`` the job's name. A record
    costs 29 bytes and no Python object; read one by one (``records[i]``, iteration) it is an :class:`IterationRecord`
    made then, equal to the one a backend would have made. Tables and summaries read :meth:`columns`
    (:func:`iterations_to_table`, the run's job summaries, ``hybridsim bench``).

    Filled a record at a time (:meth:`append`, :meth:`extend` with records) or a block at a time
    (:meth:`extend_columns`: arrays, e.g. the embedded engine's native core's whole store at the end of a run, kept
    as they are). :attr:`simulated` is the flags as a sequence of bools."""

    def __init__(self, names: Sequence[str]):
        self.names = list(names)
        #: blocks of whole columns, in order, before the rows appended one by one (``_bufs``, ``_sim``)
        self._parts: list[tuple[np.ndarray, ...]] = []
        self._n_parts = 0
        self._cols: dict[str, np.ndarray] | None = None
        self._new_buffers()
        self.simulated = _Flags(self)

    def _new_buffers(self) -> None:
        self._bufs = tuple(array(_CODES[t]) for _, t in _COLUMN_TYPES)
        self._sim = array("b")
        #: the bound ``append`` of each column buffer, for :meth:`append` (once per simulated rank-iteration)
        self._app = tuple(b.append for b in self._bufs) + (self._sim.append,)

    def __len__(self) -> int:
        return self._n_parts + len(self._sim)

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
        """:class:`IterationRecord` s at the end, all ``simulated`` or all not."""
        for r in records:
            self.append(r.job_id, r.rank, r.iteration, r.start, r.end, simulated)

    def extend_columns(self, job_id, rank, iteration, start, end, simulated) -> None:
        """A block of records at the end, one array a field (``simulated``: bools or 0/1), kept as given where the
        types are the columns' (no copy)."""
        self._seal()
        cols = tuple(np.asarray(c, dtype=t) for c, (_, t) in zip((job_id, rank, iteration, start, end),
                                                                   _COLUMN_TYPES))
        flags = np.asarray(simulated)
        flags = flags.view(np.bool_) if flags.dtype in (np.int8, np.uint8) else flags.astype(np.bool_)
        n = len(cols[0])
        if any(len(c) != n for c in cols + (flags,)):
            raise ValueError("IterationColumns.extend_columns: columns of different lengths")
        if n:
            self._parts.append(cols + (flags,))
            self._n_parts += n
        self._cols = None

    def _seal(self) -> None:
        """The rows appended one by one become a block (so that a block added next comes after them)."""
        if len(self._sim):
            part = tuple(np.array(b, dtype=t) for b, (_, t) in zip(self._bufs, _COLUMN_TYPES))
            self._parts.append(part + (np.array(self._sim, dtype=np.bool_),))
            self._n_parts += len(self._sim)
            self._new_buffers()

    def columns(self) -> dict[str, np.ndarray]:
        """``{"job_id", "rank", "iteration", "start", "end", "simulated"}``: the columns as numpy arrays (read-only;
        made once until the next record, and then the only copy held)."""
        if self._cols is None:
            self._seal()
            if len(self._parts) != 1:
                empty = tuple(np.zeros(0, t) for _, t in _COLUMN_TYPES) + (np.zeros(0, np.bool_),)
                self._parts = [tuple(np.concatenate(cs) for cs in zip(*self._parts))] if self._parts else [empty]
            part = self._parts[0]
            for c in part:
                c.flags.writeable = False
            self._cols = dict(zip([name for name, _ in _COLUMN_TYPES] + ["simulated"], part))
        return self._cols

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"record {i} of {n}")
        c = self.columns()
        j = int(c["job_id"][i])
        return IterationRecord(self.names[j], j, int(c["rank"][i]), int(c["iteration"][i]), float(c["start"][i]),
                               float(c["end"][i]))

    def __iter__(self):
        c = self.columns()
        names = self.names
        for j, r, it, s, e in zip(*(c[name].tolist() for name, _ in _COLUMN_TYPES)):
            yield IterationRecord(names[j], j, r, it, s, e)

    def __eq__(self, other) -> bool:
        if isinstance(other, IterationColumns):
            a, b = self.columns(), other.columns()
            return (len(self) == len(other) and self.names == other.names
                    and all(np.array_equal(a[k], b[k]) for k in a))
        return isinstance(other, _Sequence) and len(other) == len(self) and all(a == b for a, b in zip(self, other))

    __hash__ = None

    def __repr__(self) -> str:
        return f"IterationColumns({len(self)} records)"


def iteration_columns(records) -> dict[str, np.ndarray]:
    """The fields of ``records`` as arrays (``job_id``, ``rank``, ``iteration``, ``start``, ``end``): an
    :class:`IterationColumns`' own columns, or those of any sequence of :class:`IterationRecord` (a backend that
    makes objects), in their order."""
    if isinstance(records, IterationColumns):
        return records.columns()
    recs = list(records)
    return {name: np.array([getattr(r, name) for r in recs], dtype=t) for name, t in _COLUMN_TYPES}


class RecordBlock(_Sequence):
    """A block of records held elsewhere as columns, read as :class:`IterationRecord` s only where someone reads
    them: what ``read(lo, hi)`` gives as ``(job ids, ranks, iterations, starts, ends, ...)`` arrays for rows ``lo`` ..
    ``hi - 1`` (the native core's burst of predicted iterations, what
    :meth:`hybridsim_common.backend.Director.on_records` gets: a director that takes the burst's spans reads none)."""

    __slots__ = ("names", "read", "lo", "hi")

    def __init__(self, names: Sequence[str], read, lo: int, hi: int):
        self.names, self.read, self.lo, self.hi = names, read, lo, hi

    def __len__(self) -> int:
        return self.hi - self.lo

    def __getitem__(self, i):
        return list(self)[i]

    def __iter__(self):
        names = self.names
        cols = self.read(self.lo, self.hi)[:5]
        for j, r, it, s, e in zip(*(c.tolist() for c in cols)):
            yield IterationRecord(names[j], j, r, it, s, e)


class RecordRows(_Sequence):
    """Records held as ``(job id, rank, iteration, start, end)`` tuples (``rows``), read as :class:`IterationRecord` s
    only where someone reads them: the embedded engine's simulated records since a director's latest call, handed
    over in one :meth:`~hybridsim_common.backend.Director.on_records` call before its next one (a director that
    reads ``rows`` makes no record object)."""

    __slots__ = ("names", "rows")

    def __init__(self, names: Sequence[str], rows: list[tuple]):
        self.names, self.rows = names, rows

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i):
        return list(self)[i]

    def __iter__(self):
        names = self.names
        for j, r, it, s, e in self.rows:
            yield IterationRecord(names[j], j, r, it, s, e)


class _Flags(_Sequence):
    """The ``simulated`` flags of an :class:`IterationColumns`, as bools (equal to a list of the same bools)."""

    def __init__(self, owner: IterationColumns):
        self._owner = owner

    def __len__(self) -> int:
        return len(self._owner)

    def __getitem__(self, i):
        v = self._owner.columns()["simulated"][i]
        return v.tolist() if isinstance(i, slice) else bool(v)

    def __iter__(self):
        return iter(self._owner.columns()["simulated"].tolist())

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
    out.extend_columns(*(table.column(c).to_numpy() for c, _ in _COLUMN_TYPES), np.ones(table.num_rows, np.bool_))
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
