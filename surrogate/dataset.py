"""Temporal graph datasets: one port graph per iteration per job, built from a hybridsim run directory.

Input (a run directory of either backend, see :mod:`hybridsim_common.rundir`):
    ``iterations.parquet``  per (job, rank, iteration) start/end times (ns)
    ``ports.parquet``       port samples every ``interval`` ns (:class:`hybridsim_common.records.PortSamples`)
    ``description.json``    what the run was (:class:`hybridsim_common.rundir.RunDescription`, written by the engine's runner
                            and the CODES importer): topology shape (the ports table's radix, sampling interval and
                            features must agree; the graph uses CODES' global arrangement, ``Dragonfly(shape)``),
                            each job's workload kind and terminals (rank r attaches to the port of ``terminals[r]``).
                            Run directories written before it existed are refused with a message naming it.

Output (``hybridsim dataset build RUN_DIR -o DATASET``), a folder:
    ``meta.json``                 format/version, topology shape, feature names, splits, normaliser, per-job info and
                                  the SHA-256 of every array file (checked on load)
    ``job-<name>.safetensors``    ``x`` float32 (T, P, F), ``y`` float64 (R, T), ``mask`` bool (P,),
                                  ``rank_port`` int64 (R,), ``start`` float64 (R, T)

Node features (see :mod:`surrogate.graphs`): for every port feature, min/max/mean/q25/q75/last over the samples
overlapping the iteration window and ending by its end (causal; active ports: their rank's window; others: the nearest
active port's).
Normalisation: ``x = (slog1p(raw) - mean) / std`` per feature, ``slog1p(v) = sign(v) log(1 + |v|)``, mean/std over
the **training split only** (all ports of the train iterations), per job.
Splits are chronological: train = first ``train_frac`` of the iterations, then ``val_frac`` validation, test = rest.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from hybridsim_common.topology import Dragonfly, DragonflyShape

from .base import SeriesView, SurrogateError
from .graphs import (feature_names, fit_normaliser, node_features, normalise, shape_dict, shape_from_dict,
                     window_ranks)

FORMAT = "hybridsim-surrogate-dataset"
VERSION = 1


class DatasetError(SurrogateError):
    """A run directory or dataset folder cannot be used (missing/corrupt file, wrong content)."""


@dataclass
class JobSeries(SeriesView):
    """The temporal graph series of one job.

    Attributes (T iterations, R ranks, P router ports, F node features):
        job:           job name
        workload:      workload kind (``milc``, ``lammps``, ``nearest_neighbor``, ...), used in SMART's prompt
        x:             float32 (T, P, F) normalised node features of the port graph of iteration t
        feature_names: list of F names, ``<port feature>_<stat>``
        mask:          bool (P,) ports with a rank of this job attached
        rank_port:     int64 (R,) port id of each rank (``router * radix + port``)
        y:             float64 (R, T) raw iteration times (ns) of each rank
        start:         float64 (R, T) iteration start times (ns)
        split:         {"train": (a, b), "val": (b, c), "test": (c, T)} half-open iteration index ranges
        shape:         topology :class:`DragonflyShape`
        norm_mean, norm_std: float64 (F,) the normaliser (fitted on the train split), for ``x = (slog1p - m) / s``
    """

    job: str
    workload: str
    x: np.ndarray
    feature_names: list[str]
    mask: np.ndarray
    rank_port: np.ndarray
    y: np.ndarray
    split: dict[str, tuple[int, int]]
    shape: DragonflyShape
    start: np.ndarray | None = None
    norm_mean: np.ndarray | None = None
    norm_std: np.ndarray | None = None

    def indices(self, name: str) -> np.ndarray:
        """Iteration indices of split ``name`` (``train``, ``val``, ``test``)."""
        a, b = self.split[name]
        return np.arange(a, b)

    def topology(self) -> Dragonfly:
        return Dragonfly(self.shape)

    # ------------------------------------------------------------------------------------------------- features
    def raw_features(self, t: int) -> np.ndarray:
        """Un-normalised node features of iteration ``t`` (float64 (P, F))."""
        z = self.x[t].astype(np.float64) * self.norm_std + self.norm_mean
        return np.sign(z) * np.expm1(np.abs(z))


@dataclass
class SurrogateDataset:
    """All job series of one run. ``jobs`` keeps the run's job-id order."""

    shape: DragonflyShape
    jobs: dict[str, JobSeries]
    port_features: list[str]
    meta: dict = field(default_factory=dict)
    path: Path | None = None

    @property
    def n_ports(self) -> int:
        return Dragonfly(self.shape).n_ports if not self.jobs else next(iter(self.jobs.values())).n_ports

    def topology(self) -> Dragonfly:
        return Dragonfly(self.shape)

    def __getitem__(self, name: str) -> JobSeries:
        try:
            return self.jobs[name]
        except KeyError:
            raise DatasetError(f"dataset has no job {name!r}; jobs: {', '.join(self.jobs)}") from None

    # ------------------------------------------------------------------------------------------------------ I/O
    def save(self, path: str | Path) -> Path:
        from safetensors.numpy import save_file

        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        jobs_meta = []
        for name, js in self.jobs.items():
            fname = f"job-{name}.safetensors"
            arrays = {"x": np.ascontiguousarray(js.x, np.float32), "y": np.ascontiguousarray(js.y, np.float64),
                      "mask": np.ascontiguousarray(js.mask, bool),
                      "rank_port": np.ascontiguousarray(js.rank_port, np.int64),
                      "start": np.ascontiguousarray(js.start if js.start is not None else np.zeros_like(js.y)),
                      "norm_mean": np.ascontiguousarray(js.norm_mean, np.float64),
                      "norm_std": np.ascontiguousarray(js.norm_std, np.float64)}
            save_file(arrays, str(path / fname))
            jobs_meta.append({"name": name, "workload": js.workload, "file": fname, "iterations": js.T,
                              "ranks": js.R, "split": {k: list(v) for k, v in js.split.items()},
                              "sha256": _sha256(path / fname)})
        meta = dict(self.meta)
        meta.update({"format": FORMAT, "version": VERSION, "topology": shape_dict(self.shape),
                     "n_ports": self.n_ports, "port_features": list(self.port_features),
                     "feature_names": feature_names(self.port_features), "jobs": jobs_meta})
        (path / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
        self.path = path
        self.meta = meta
        return path


def _sha256(p: Path) -> str:
    h = hashlib.sha256()
    with open(p, "rb") as fh:
        for blk in iter(lambda: fh.read(1 << 22), b""):
            h.update(blk)
    return h.hexdigest()


def load_dataset(path: str | Path, verify: bool = True) -> SurrogateDataset:
    """Load a dataset folder written by :func:`build_dataset`; clear :class:`DatasetError` on anything wrong."""
    from safetensors.numpy import load_file

    path = Path(path)
    mp = path / "meta.json"
    if not path.exists():
        raise DatasetError(f"{path}: dataset not found")
    if not mp.is_file():
        raise DatasetError(f"{path}: not a surrogate dataset (no meta.json; build one with `hybridsim dataset build`)")
    try:
        meta = json.loads(mp.read_text())
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{mp}: corrupt JSON: {exc}") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise DatasetError(f"{mp}: not a {FORMAT} file (format={meta.get('format') if isinstance(meta, dict) else None!r})")
    if meta.get("version") != VERSION:
        raise DatasetError(f"{mp}: dataset version {meta.get('version')} not supported (expected {VERSION})")
    try:
        shape = shape_from_dict(meta["topology"])
        fnames = list(meta["feature_names"])
        jobs_meta = list(meta["jobs"])
    except (KeyError, TypeError, ValueError) as exc:
        raise DatasetError(f"{mp}: missing or bad field {exc}") from None
    jobs: dict[str, JobSeries] = {}
    for jm in jobs_meta:
        fp = path / jm["file"]
        if not fp.is_file():
            raise DatasetError(f"{fp}: missing array file of job {jm['name']!r}")
        if verify and jm.get("sha256") and _sha256(fp) != jm["sha256"]:
            raise DatasetError(f"{fp}: checksum mismatch (file corrupt or modified since the dataset was built)")
        try:
            arr = load_file(str(fp))
        except Exception as exc:  # safetensors raises its own error types
            raise DatasetError(f"{fp}: corrupt array file: {exc}") from None
        for k in ("x", "y", "mask", "rank_port"):
            if k not in arr:
                raise DatasetError(f"{fp}: missing array {k!r}")
        x = arr["x"]
        if x.ndim != 3 or x.shape[2] != len(fnames) or x.shape[1] != int(meta.get("n_ports", x.shape[1])):
            raise DatasetError(f"{fp}: x has shape {x.shape}, meta says {meta.get('n_ports')} ports x "
                               f"{len(fnames)} features")
        if not np.isfinite(x).all():
            bad = np.argwhere(~np.isfinite(x))[0]
            raise DatasetError(f"{fp}: non-finite node feature at iteration {bad[0]}, port {bad[1]}, "
                               f"feature {fnames[bad[2]]!r}")
        y = arr["y"]
        if y.shape[1] != x.shape[0] or not np.isfinite(y).all() or (y <= 0).any():
            raise DatasetError(f"{fp}: targets y must be positive finite with one column per graph "
                               f"(y {y.shape}, x {x.shape})")
        split = {k: (int(v[0]), int(v[1])) for k, v in jm["split"].items()}
        jobs[jm["name"]] = JobSeries(job=jm["name"], workload=jm.get("workload", jm["name"]), x=x,
                                     feature_names=fnames, mask=arr["mask"].astype(bool),
                                     rank_port=arr["rank_port"].astype(np.int64), y=y, split=split, shape=shape,
                                     start=arr.get("start"), norm_mean=arr.get("norm_mean"),
                                     norm_std=arr.get("norm_std"))
    return SurrogateDataset(shape=shape, jobs=jobs, port_features=list(meta.get("port_features", [])), meta=meta,
                            path=path)


# ------------------------------------------------------------------------------------------------------------ build
def make_splits(T: int, train_frac: float = 0.3, val_frac: float = 0.1) -> dict[str, tuple[int, int]]:
    """Chronological split: train = ``[0, a)``, val = ``[a, b)``, test = ``[b, T)`` with ``a = max(2, floor(f T))``."""
    if not (0 < train_frac < 1 and 0 <= val_frac < 1 and train_frac + val_frac < 1):
        raise DatasetError(f"bad split fractions train={train_frac} val={val_frac}")
    a = max(2, int(math.floor(train_frac * T)))
    b = a + int(math.floor(val_frac * T))
    if b >= T:
        raise DatasetError(f"{T} iterations are too few for a train/val/test split ({train_frac}/{val_frac})")
    return {"train": (0, a), "val": (a, b), "test": (b, T)}


def _job_terminals(run_dir: Path, desc, name: str, R: int, topo: Dragonfly) -> np.ndarray:
    """Terminal ids of ranks 0..R-1 of job ``name`` from the run description, checked against the topology."""
    from hybridsim_common.rundir import DESCRIPTION

    where = f"{run_dir}/{DESCRIPTION}"
    i = next((k for k, j in enumerate(desc.jobs) if j.name == name), None)
    if i is None:
        raise DatasetError(f"{where}: no job {name!r} (jobs: {', '.join(j.name for j in desc.jobs) or 'none'})")
    terms = desc.jobs[i].terminals
    if terms is None:
        raise DatasetError(f"{where}: field 'jobs[{i}].terminals' is null: the terminals of job {name!r} are unknown "
                           "(a CODES run imported without an allocation file?)")
    if len(terms) < R:
        raise DatasetError(f"{where}: field 'jobs[{i}].terminals' lists {len(terms)} terminals for the {R} ranks "
                           f"of job {name!r}")
    terms = np.asarray(terms[:R], dtype=np.int64)
    if terms.min() < 0 or terms.max() >= topo.n_terminals:
        raise DatasetError(f"{where}: placement of job {name!r}: terminal outside 0..{topo.n_terminals - 1}")
    return terms


def _pivot(table, job: str):
    """(R, T) start/end arrays of one job over the iterations every rank completed (0..T-1)."""
    import pyarrow.compute as pc

    sub = table.filter(pc.equal(table.column("job"), job))
    rank = sub.column("rank").to_numpy().astype(np.int64)
    it = sub.column("iteration").to_numpy().astype(np.int64)
    st = sub.column("start").to_numpy().astype(np.float64)
    en = sub.column("end").to_numpy().astype(np.float64)
    if (rank < 0).any() or (it < 0).any():
        raise DatasetError(f"iterations.parquet: job {job!r} has negative rank or iteration numbers")
    R = int(rank.max()) + 1
    Tmax = int(it.max()) + 1
    have = np.zeros((R, Tmax), bool)
    S = np.full((R, Tmax), np.nan)
    E = np.full((R, Tmax), np.nan)
    have[rank, it] = True
    S[rank, it] = st
    E[rank, it] = en
    missing_rank = ~have.any(axis=1)
    if missing_rank.any():
        raise DatasetError(f"iterations.parquet: job {job!r} has no records for rank(s) "
                           f"{np.flatnonzero(missing_rank)[:10].tolist()}")
    # T = number of leading iterations every rank completed
    full = have.all(axis=0)
    T = int(np.argmin(full)) if not full.all() else Tmax
    return S[:, :T], E[:, :T]


def build_dataset(run_dir: str | Path, out: str | Path | None = None, *, train_frac: float = 0.3,
                  val_frac: float = 0.1, jobs: list[str] | None = None, min_iterations: int = 10,
                  progress: bool = False) -> SurrogateDataset:
    """Build (and with ``out`` save) the dataset of a run directory. Deterministic: same run -> same arrays."""
    from hybridsim_common.records import read_iterations, read_ports
    from hybridsim_common.rundir import DESCRIPTION, ITERATIONS, PORTS, RunDirError, read_description, read_manifest

    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise DatasetError(f"{run_dir}: run directory not found")
    try:
        manifest = read_manifest(run_dir)
    except RunDirError as exc:
        raise DatasetError(str(exc)) from None
    if manifest.get("status") not in (None, "completed"):
        raise DatasetError(f"{run_dir}: run status is {manifest.get('status')!r}, not 'completed'")
    for f in (ITERATIONS, PORTS):
        if not (run_dir / f).is_file():
            raise DatasetError(f"{run_dir}: missing {f} (a dataset needs iteration records and port samples)")
    try:
        table = read_iterations(run_dir / ITERATIONS)
        samples = read_ports(run_dir / PORTS)
    except DatasetError:
        raise
    except Exception as exc:
        raise DatasetError(f"{run_dir}: cannot read run tables: {exc}") from None
    if samples.values.shape[0] == 0:
        raise DatasetError(f"{run_dir}/{PORTS}: no port samples")
    if not np.isfinite(samples.values).all():
        bad = np.argwhere(~np.isfinite(samples.values))[0]
        raise DatasetError(f"{run_dir}/{PORTS}: non-finite value at sample {bad[0]} (t_end={samples.t_end[bad[0]]}), "
                           f"port {bad[1]}, feature {samples.features[bad[2]]!r}")
    try:
        desc = read_description(run_dir)
    except RunDirError as exc:
        raise DatasetError(str(exc)) from None
    shape = desc.shape
    if shape.radix != samples.radix:
        raise DatasetError(f"{run_dir}/{PORTS} has radix {samples.radix} but the topology in {DESCRIPTION} has radix "
                           f"{shape.radix}")
    if desc.sampling_interval is not None and (desc.sampling_interval != samples.interval
                                               or desc.port_features != list(samples.features)):
        raise DatasetError(f"{run_dir}/{PORTS} (interval {samples.interval:g} ns, features "
                           f"{list(samples.features)}) does not match {DESCRIPTION} (interval "
                           f"{desc.sampling_interval:g} ns, features {desc.port_features})")
    topo = Dragonfly(shape)
    P = topo.n_ports
    values = samples.values
    if values.shape[1] < P:
        values = np.concatenate([values, np.zeros((values.shape[0], P - values.shape[1], values.shape[2]),
                                                  np.float32)], axis=1)
    elif values.shape[1] > P:
        raise DatasetError(f"{run_dir}/{PORTS}: {values.shape[1]} ports, topology has {P}")

    # job order: by job id
    jid = table.column("job_id").to_numpy()
    jname = table.column("job").to_pylist()
    order: dict[str, int] = {}
    for n, i in zip(jname, jid.tolist()):
        order.setdefault(n, i)
    names = sorted(order, key=lambda n: (order[n], n))
    if jobs:
        unknown = [j for j in jobs if j not in order]
        if unknown:
            raise DatasetError(f"{run_dir}: no iterations for job(s) {unknown}; jobs: {names}")
        names = [n for n in names if n in jobs]
    fnames = feature_names(samples.features)

    series: dict[str, JobSeries] = {}
    for name in names:
        S, E = _pivot(table, name)
        R, T = S.shape
        if T < min_iterations:
            continue
        terms = _job_terminals(run_dir, desc, name, R, topo)
        rank_port = topo.terminal_port_ids[terms].astype(np.int64)
        y = E - S
        if not (np.isfinite(y).all() and (y > 0).all()):
            bad = np.argwhere(~(np.isfinite(y) & (y > 0)))[0]
            raise DatasetError(f"{run_dir}/{ITERATIONS}: job {name!r} rank {bad[0]} iteration {bad[1]}: "
                               f"iteration time {y[bad[0], bad[1]]} is not positive")
        wrank = window_ranks(topo, rank_port)  # (P,) rank whose window each port uses
        if (wrank < 0).any():
            raise DatasetError(f"job {name!r}: ports not connected to any active port")
        raw = node_features(samples.t_end, samples.interval, values, wrank, S, E)   # (T, P, F)
        split = make_splits(T, train_frac, val_frac)
        a, b = split["train"]
        mu, sd = fit_normaliser(raw[a:b])
        x = normalise(raw, mu, sd)
        if not np.isfinite(x).all():
            raise DatasetError(f"job {name!r}: non-finite node features after normalisation")
        mask = np.zeros(P, bool)
        mask[rank_port] = True
        series[name] = JobSeries(job=name, workload=desc.job(name).workload, x=x, feature_names=fnames,
                                 mask=mask, rank_port=rank_port, y=y, split=split, shape=shape, start=S,
                                 norm_mean=mu, norm_std=sd)
    if not series:
        raise DatasetError(f"{run_dir}: no job with at least {min_iterations} complete iterations")
    meta = {"source": {"run_dir": str(run_dir), "kind": manifest.get("kind"),
                       "scenario_name": (manifest.get("scenario") or {}).get("name")
                       if isinstance(manifest.get("scenario"), dict) else None},
            "sampling_interval_ns": float(samples.interval), "train_frac": train_frac, "val_frac": val_frac,
            "normaliser": "x = (sign(v) log1p|v| - mean) / std per feature, fitted on the train split"}
    ds = SurrogateDataset(shape=shape, jobs=series, port_features=list(samples.features), meta=meta)
    if out is not None:
        ds.save(out)
    return ds
