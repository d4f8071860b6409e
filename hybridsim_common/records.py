"""Records every backend emits and every consumer reads.

Two kinds of record flow from a backend (embedded engine or CODES import) to the surrogate and the controller:

* :class:`IterationRecord` -- one rank of one job finished one iteration. ``start`` and ``end`` are virtual times in
  **nanoseconds**; ``end - start`` is the iteration time the surrogate predicts.
* port samples -- every ``sampling.interval`` of virtual time, one row per router port with the features named in
  :data:`PORT_FEATURES` (and optionally per-VC extras). They are held as a dense block :class:`PortSamples`
  (``values[sample, port, feature]``) because the surrogate consumes them as tensors.

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


def records_from_table(table: pa.Table) -> list[IterationRecord]:
    cols = {c: table.column(c).to_pylist() for c in ITERATION_COLUMNS}
    return [
        IterationRecord(cols["job"][i], cols["job_id"][i], cols["rank"][i], cols["iteration"][i], cols["start"][i],
                        cols["end"][i])
        for i in range(table.num_rows)
    ]


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
