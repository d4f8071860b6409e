"""Temporal graph datasets: one port graph per iteration per job, built from a hybridsim run directory.

Input (a run directory of either backend, see :mod:`hybridsim.rundir`):
    ``iterations.parquet``  per (job, rank, iteration) start/end times (ns)
    ``ports.parquet``       port samples every ``interval`` ns (:class:`hybridsim.records.PortSamples`)
    ``manifest.json``       topology shape and rank placement, taken from (first match wins):
        topology:  ``manifest["topology"]`` (dict with groups, routers_per_group, terminals_per_router,
                   global_channels_per_router) or ``manifest["scenario"]["topology"]``; the ports table's radix must
                   agree. The graph uses CODES' global arrangement (``Dragonfly(shape)``).
        placement: ``manifest["placement"]``: ``{job name: [terminal id of rank 0, 1, ...]}`` or a list of such lists
                   in job-id order; else ``place_jobs(scenario)`` of the resolved ``manifest["scenario"]``.
        workload:  ``manifest["jobs"]`` (list of ``{"name", "workload"}``) or the scenario's ``jobs[*].workload.kind``;
                   else the job name.

Output (``hybridsim dataset build RUN_DIR -o DATASET``), a folder:
    ``meta.json``                 format/version, topology shape, feature names, splits, normaliser, per-job info and
                                  the SHA-256 of every array file (checked on load)
    ``job-<name>.safetensors``    ``x`` float32 (T, P, F), ``y`` float64 (R, T), ``mask`` bool (P,),
                                  ``rank_port`` int64 (R,), ``start`` float64 (R, T)

Node features (see :mod:`surrogate.graphs`): for every port feature, min/max/mean/q25/q75/last over the samples
overlapping the iteration window (active ports: their rank's window; others: the nearest active port's).
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

from hybridsim.topology import Dragonfly, DragonflyShape

from .base import SeriesView, SurrogateError
from .graphs import (feature_names, fit_normaliser, node_features, normalise, shape_dict, shape_from_dict,
                     slog1p, window_ranks)

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


def _codes_fallback(manifest: dict) -> dict:
    """For ``codes-import`` run directories whose manifest carries no topology/placement: read them from the CODES
    run directory the import came from (``manifest["codes_run_dir"]``: network .conf, ``--alloc_file``, workloads
    file)."""
    d = manifest.get("codes_run_dir")
    if not d or not Path(d).is_dir():
        return {}
    from hybridsim.placement import read_alloc_file

    try:
        from codes_bridge.conf import (command_options, find_network_conf, find_workloads_conf,
                                       job_names_from_workloads, parse_conf, parse_workloads_conf)
    except ImportError:
        return {}
    out: dict = {}
    try:
        shape = parse_conf(find_network_conf(d)).shape()
        out["topology"] = shape_dict(shape)
        wl = find_workloads_conf(d)
        names = job_names_from_workloads(parse_workloads_conf(wl)) if wl else None
        alloc = command_options(d).get("alloc_file")
        if alloc and names and (Path(d) / alloc).is_file():
            rows = read_alloc_file(Path(d) / alloc)
            out["placement"] = {n: r for n, r in zip(names, rows)}
        if names:
            out["jobs"] = [{"name": n, "workload": _guess_workload(n)} for n in names]
    except Exception as exc:  # ConfError, PlacementError, OSError
        raise DatasetError(f"{d}: cannot read the CODES run's topology/placement: {exc}") from None
    return out


def _guess_workload(name: str) -> str:
    low = name.lower()
    for key, kind in (("milc", "milc"), ("lammps", "lammps"), ("nearest", "nearest_neighbor"), ("nn", "nearest_neighbor"),
                      ("synthetic", "uniform_random"), ("allreduce", "allreduce")):
        if key in low:
            return kind
    return name


def _manifest_shape(manifest: dict, radix: int | None) -> DragonflyShape:
    topo = manifest.get("topology")
    if not isinstance(topo, dict) or "groups" not in topo:
        scen = manifest.get("scenario") or {}
        topo = scen.get("topology") if isinstance(scen, dict) else None
        if topo is None and isinstance(scen, dict) and scen:
            from hybridsim.scenario import Topology

            topo = Topology().model_dump()
    if not isinstance(topo, dict):
        raise DatasetError("manifest.json has neither 'topology' nor 'scenario.topology': cannot build the port graph")
    from hybridsim.scenario import Topology

    try:
        t = Topology.model_validate(topo)
    except Exception as exc:
        raise DatasetError(f"manifest.json: bad topology: {exc}") from None
    shape = t.shape
    if radix is not None and shape.radix != radix:
        raise DatasetError(f"ports.parquet has radix {radix} but the manifest's topology has radix {shape.radix}")
    return shape


def _manifest_placement(manifest: dict, run_dir: Path, topo: Dragonfly, job_names: list[str]) -> dict[str, np.ndarray]:
    pl = manifest.get("placement")
    if isinstance(pl, dict) and pl and all(isinstance(v, list) for v in pl.values()):
        return {k: np.asarray(v, dtype=np.int64) for k, v in pl.items()}
    if isinstance(pl, list) and pl and all(isinstance(v, list) for v in pl):
        scen_jobs = [j.get("name") for j in (manifest.get("scenario") or {}).get("jobs", [])] or \
                    [j.get("name") for j in manifest.get("jobs", [])]
        names = scen_jobs if len(scen_jobs) == len(pl) else job_names
        return {n: np.asarray(v, dtype=np.int64) for n, v in zip(names, pl)}
    scen = manifest.get("scenario")
    if not isinstance(scen, dict):
        raise DatasetError(f"{run_dir}/manifest.json: no 'placement' and no resolved 'scenario': cannot attach ranks "
                           "to ports")
    from hybridsim.placement import place_jobs
    from hybridsim.scenario import Scenario

    try:
        sc = Scenario.model_validate(scen)
        sc._source = run_dir / "manifest.json"
        placed = place_jobs(sc, topo)
    except Exception as exc:
        raise DatasetError(f"{run_dir}/manifest.json: cannot derive the placement from the scenario: {exc}") from None
    return {j.name: p for j, p in zip(sc.jobs, placed)}


def _manifest_workloads(manifest: dict) -> dict[str, str]:
    out = {}
    for j in manifest.get("jobs", []) or []:
        if isinstance(j, dict) and "name" in j and "workload" in j:
            w = j["workload"]
            out[j["name"]] = w.get("kind") if isinstance(w, dict) else str(w)
    scen = manifest.get("scenario")
    if isinstance(scen, dict):
        for j in scen.get("jobs", []) or []:
            if isinstance(j, dict) and "name" in j and j["name"] not in out:
                w = j.get("workload")
                if isinstance(w, dict) and "kind" in w:
                    out[j["name"]] = w["kind"]
    return out


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
    from hybridsim.records import read_iterations, read_ports
    from hybridsim.rundir import ITERATIONS, PORTS, RunDirError, read_manifest

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
    if manifest.get("kind") == "codes-import" and not (manifest.get("placement") and manifest.get("topology")) \
            and not isinstance(manifest.get("scenario"), dict):
        fb = _codes_fallback(manifest)
        manifest = {**fb, **{k: v for k, v in manifest.items() if v is not None}}
    shape = _manifest_shape(manifest, samples.radix)
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
    placement = _manifest_placement(manifest, run_dir, topo, names)
    workloads = _manifest_workloads(manifest)
    fnames = feature_names(samples.features)

    series: dict[str, JobSeries] = {}
    for name in names:
        S, E = _pivot(table, name)
        R, T = S.shape
        if T < min_iterations:
            continue
        if name not in placement:
            raise DatasetError(f"{run_dir}/manifest.json: placement has no job {name!r}")
        terms = placement[name]
        if len(terms) < R:
            raise DatasetError(f"{run_dir}/manifest.json: placement of job {name!r} lists {len(terms)} terminals "
                               f"for {R} ranks")
        terms = terms[:R]
        if terms.min() < 0 or terms.max() >= topo.n_terminals:
            raise DatasetError(f"placement of job {name!r}: terminal outside 0..{topo.n_terminals - 1}")
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
        series[name] = JobSeries(job=name, workload=workloads.get(name, name), x=x, feature_names=fnames,
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
