"""``hybridsim.v1.Surrogate``: any :class:`surrogate.base.Surrogate` behind gRPC.

The server holds jobs (declared with ``OpenJob``), the ground truth each has been sent (``Tune``), and one model.
``Predict`` builds exactly the :class:`surrogate.base.Context` the model would get in-process (float64 history
round-trips bit for bit) and returns the model's answer unchanged, so predictions are identical to the in-process
model. Predictions of many clients run at once (a thread pool; a readers-writer lock lets predictions share the
model while ``Tune`` and ``Save`` have it alone).

Hostile or broken clients: every field is checked (``INVALID_ARGUMENT`` names it, also for a request over a limit
such as ``max_ranks``), unknown jobs are ``NOT_FOUND``, requests beyond ``max_in_flight`` get ``RESOURCE_EXHAUSTED``
at once, as do jobs beyond ``max_jobs`` and truth beyond ``max_state_bytes``; messages are limited to
``max_message_bytes``; an all-NaN history is refused rather than answered with NaN, an all-NaN Tune window rather
than counted as a new model version; a request that does not decode is INVALID_ARGUMENT; Save never overwrites
(``ALREADY_EXISTS``). The server listens on 127.0.0.1 unless told otherwise.

Tuning: ``Tune`` appends the window to the job's truth and calls ``model.tune(dataset, window_idx)`` with a
:class:`JobDataset`, a :class:`surrogate.base.SeriesView`: ``y`` (R, T) truth in ns, NaN where unknown;
``iterations`` (T,); ``x`` a (T, P, F) :class:`surrogate.base.TailGraphs` holding the port graphs of the last
Tg <= ``max_graph_iterations`` columns of ``y`` (NaN before them and where not sent) or None; ``mask``,
``rank_port``, ``workload``, ``job``, ``shape`` None (a graph model must be created for its topology: ``topology``
and ``in_features`` in its config). A graph model is given only the targets whose graph look-back is held. With
``fit`` set, ``model.fit(dataset, window_idx)`` is called instead.
"""

from __future__ import annotations

import json
import logging
import math
import re
import threading
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import numpy as np

from surrogate.base import MAX_LOOKBACK, SeriesView, TailGraphs  # one look-back bound for every path

from ._common import (DEFAULT_MAX_MESSAGE_BYTES, InFlightLimiter, ServiceError, Undecodable, add_health_and_reflection,
                      add_unary_servicer, bind, from_tensor, invalid, over_limit, server_options)
from ._gen import surrogate_pb2, surrogate_pb2_grpc
from .limits import DEFAULT_MAX_HISTORY, DEFAULT_MAX_JOBS, DEFAULT_MAX_RANKS, DEFAULT_MAX_STATE_BYTES

log = logging.getLogger(__name__)

SERVICE_NAME = surrogate_pb2.DESCRIPTOR.services_by_name["Surrogate"].full_name
MAX_NAME = 256
MAX_ITERATION = 2**31 - 1


def load_model(spec: str, config: dict | None = None):
    """The one model ``spec`` names (:func:`surrogate.load`: a name, ``name:k=v`` or a single-model checkpoint
    folder); ``config``: a named model's options."""
    import surrogate

    return surrogate.load(spec, config).new()


class RWLock:
    """Many readers or one writer; a waiting writer blocks new readers (no writer starvation)."""

    def __init__(self):
        self._cond = threading.Condition()
        self._readers = 0
        self._writer = False
        self._waiting_writers = 0

    def acquire_read(self):
        with self._cond:
            while self._writer or self._waiting_writers:
                self._cond.wait()
            self._readers += 1

    def release_read(self):
        with self._cond:
            self._readers -= 1
            if not self._readers:
                self._cond.notify_all()

    def acquire_write(self):
        with self._cond:
            self._waiting_writers += 1
            while self._writer or self._readers:
                self._cond.wait()
            self._waiting_writers -= 1
            self._writer = True

    def release_write(self):
        with self._cond:
            self._writer = False
            self._cond.notify_all()


@dataclass
class JobDataset(SeriesView):
    """What ``model.tune`` gets: the truth the server holds for one job (see the module docstring)."""

    job: str
    workload: str
    y: np.ndarray
    iterations: np.ndarray
    x: TailGraphs | None = None
    mask: np.ndarray | None = None
    rank_port: np.ndarray | None = None
    shape: object | None = None


@dataclass
class _Job:
    name: str
    workload: str
    ranks: int
    rank_port: np.ndarray | None
    mask: np.ndarray | None
    first: int = 0                       # iteration of truth column 0
    truth: np.ndarray | None = None      # (R, T) float64, NaN = unknown
    graphs: dict = field(default_factory=dict)  # iteration -> (P, F) float32
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def state_bytes(self) -> int:
        return (0 if self.truth is None else self.truth.nbytes) + sum(g.nbytes for g in self.graphs.values())

    @property
    def n_truth(self) -> int:
        return 0 if self.truth is None else int(np.count_nonzero(~np.isnan(self.truth)))

    def add_truth(self, rows: np.ndarray, first: int, values: np.ndarray, cap: int) -> np.ndarray:
        """Write ``values`` (len(rows), W) at iterations first..first+W-1; keep the last ``cap`` iterations.
        Returns the window's column indices in the new truth array (those still kept)."""
        W = values.shape[1]
        if self.truth is None:
            lo, hi = first, first + W
        else:
            lo, hi = min(self.first, first), max(self.first + self.truth.shape[1], first + W)
        lo = max(lo, hi - cap)
        new = np.full((self.ranks, hi - lo), np.nan)
        if self.truth is not None:
            a, b = max(lo, self.first), min(hi, self.first + self.truth.shape[1])
            if a < b:
                new[:, a - lo:b - lo] = self.truth[:, a - self.first:b - self.first]
        a = max(lo, first)
        if a < first + W:
            sel = np.ix_(rows, np.arange(a - lo, first + W - lo))
            v = values[:, a - first:]
            new[sel] = np.where(np.isnan(v), new[sel], v)   # NaN = unknown: keeps what was known
        self.truth, self.first = new, lo
        return np.arange(a - lo, first + W - lo)

    def history(self, rows: np.ndarray, lookback: int) -> np.ndarray:
        T = self.truth.shape[1]
        h = np.full((len(rows), lookback), np.nan)
        n = min(T, lookback)
        h[:, lookback - n:] = self.truth[rows, T - n:]
        return h


def _servicer_method(fn):
    """Turn :class:`ServiceError` into a gRPC status, and anything unexpected into INTERNAL."""

    def wrapper(self, request, context):
        try:
            if isinstance(request, Undecodable):
                raise request.refusal()
            return fn(self, request, context)
        except ServiceError as exc:
            context.abort(exc.code, str(exc))
        except grpc.RpcError:
            raise
        except Exception as exc:  # noqa: BLE001 - a server must answer, not die
            if type(exc).__name__ == "_AbortError" or isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            log.exception("%s failed", fn.__name__)
            context.abort(grpc.StatusCode.INTERNAL, f"{fn.__name__}: {type(exc).__name__}: {exc}")

    wrapper.__name__ = fn.__name__
    wrapper.__doc__ = fn.__doc__
    return wrapper


def _check_name(value: str, field_name: str) -> str:
    if not value:
        raise invalid(field_name, "required")
    if len(value) > MAX_NAME or any(ord(c) < 32 for c in value):
        raise invalid(field_name, f"must be at most {MAX_NAME} printable characters")
    return value


class SurrogateServicer(surrogate_pb2_grpc.SurrogateServicer):
    def __init__(self, model, *, save_dir: str | Path | None = None, max_jobs: int = DEFAULT_MAX_JOBS,
                 max_truth_iterations: int = DEFAULT_MAX_HISTORY, max_graph_iterations: int = 32,
                 limiter: InFlightLimiter | None = None, max_ranks: int = DEFAULT_MAX_RANKS,
                 max_state_bytes: int = DEFAULT_MAX_STATE_BYTES):
        self.model = model
        self.save_dir = Path(save_dir).resolve() if save_dir else None
        self.max_jobs = int(max_jobs)
        self.max_ranks = int(max_ranks)
        self.max_state_bytes = int(max_state_bytes)
        self.max_truth_iterations = int(max_truth_iterations)
        self.max_graph_iterations = int(max_graph_iterations)
        self.limiter = limiter
        self.version = 0
        self._jobs: dict[str, _Job] = {}
        self._jobs_lock = threading.Lock()
        self._model_lock = RWLock()
        self._stats_lock = threading.Lock()
        self.predictions = self.predict_calls = self.tune_calls = 0

    # -------------------------------------------------------------------------------------------- helpers
    def _job(self, name: str) -> _Job:
        _check_name(name, "job")
        with self._jobs_lock:
            job = self._jobs.get(name)
        if job is None:
            raise ServiceError(grpc.StatusCode.NOT_FOUND, f"job: no job {name!r} (declare it with OpenJob)")
        return job

    @staticmethod
    def _rows(job: _Job, ranks, field_name: str = "ranks") -> np.ndarray:
        if not len(ranks):
            return np.arange(job.ranks)
        rows = np.fromiter(ranks, dtype=np.int64, count=len(ranks))
        bad = np.flatnonzero(rows >= job.ranks)
        if len(bad):
            i = int(bad[0])
            raise invalid(f"{field_name}[{i}]", f"rank {rows[i]} out of range [0, {job.ranks}) of job {job.name!r}")
        if len(np.unique(rows)) != len(rows):
            u, c = np.unique(rows, return_counts=True)
            raise invalid(field_name, f"rank {int(u[c > 1][0])} appears more than once")
        return rows

    def _graphs(self, request, job: _Job, field_name: str, n: int | None = None) -> np.ndarray | None:
        if not request.HasField("graphs"):
            return None
        g = from_tensor(request.graphs, field_name, None, ndim=3)
        if g.dtype.kind != "f":
            raise invalid(f"{field_name}.dtype", "expected FLOAT32 or FLOAT64")
        if n is not None and g.shape[0] != n:
            raise invalid(f"{field_name}.shape", f"expected {n} graphs (one per window iteration), got {g.shape[0]}")
        if job.mask is not None and g.shape[1] != len(job.mask):
            raise invalid(f"{field_name}.shape", f"{g.shape[1]} ports, but the job's mask has {len(job.mask)}")
        if not np.isfinite(g).all():
            raise invalid(field_name, "contains NaN or infinite values")
        return g

    def _check_state_budget(self, job: _Job, first: int, W: int, graphs) -> None:
        """Refuse (RESOURCE_EXHAUSTED) a Tune that would make the truth and graphs of all jobs exceed
        ``max_state_bytes``, before anything is allocated."""
        with job.lock:
            lo, hi = (first, first + W) if job.truth is None else \
                (min(job.first, first), max(job.first + job.truth.shape[1], first + W))
            T = min(hi - lo, self.max_truth_iterations)
            g = 0 if graphs is None else min(T, self.max_graph_iterations) * graphs[0].size * 4
            after = job.ranks * T * 8 + g
            before = job.state_bytes
        with self._jobs_lock:
            jobs = list(self._jobs.values())
        total = sum(j.state_bytes for j in jobs if j is not job) + max(after, before)
        if total > self.max_state_bytes:
            raise ServiceError(grpc.StatusCode.RESOURCE_EXHAUSTED,
                               f"durations: keeping this window would hold {total} bytes of truth and graphs, more "
                               f"than this server's limit of {self.max_state_bytes} (--max-state-mb); close jobs "
                               f"(CloseJob)")

    # -------------------------------------------------------------------------------------------- RPCs
    @_servicer_method
    def OpenJob(self, request, context):
        name = _check_name(request.job, "job")
        workload = request.workload
        if len(workload) > MAX_NAME:
            raise invalid("workload", f"longer than {MAX_NAME} characters")
        if request.ranks < 1:
            raise invalid("ranks", "must be >= 1")
        if request.ranks > self.max_ranks:
            raise over_limit("ranks", request.ranks, self.max_ranks, "--max-ranks")
        rank_port = None
        mask = None
        if request.HasField("mask"):
            mask = from_tensor(request.mask, "mask", np.bool_, ndim=1).copy()
        if len(request.rank_port):
            if len(request.rank_port) != request.ranks:
                raise invalid("rank_port", f"{len(request.rank_port)} values for {request.ranks} ranks")
            rank_port = np.array(request.rank_port, dtype=np.int64)
            limit = len(mask) if mask is not None else None
            bad = np.flatnonzero((rank_port < 0) | ((rank_port >= limit) if limit is not None else False))
            if len(bad):
                i = int(bad[0])
                raise invalid(f"rank_port[{i}]", f"port {rank_port[i]} out of range"
                                                 + (f" [0, {limit})" if limit is not None else ""))
        job = _Job(name, workload, int(request.ranks), rank_port, mask)
        with self._jobs_lock:
            replaced = name in self._jobs
            if not replaced and len(self._jobs) >= self.max_jobs:
                raise ServiceError(grpc.StatusCode.RESOURCE_EXHAUSTED,
                                   f"job: the server already holds {self.max_jobs} jobs; close some (CloseJob)")
            self._jobs[name] = job
        return surrogate_pb2.OpenJobReply(job=name, replaced=replaced)

    @_servicer_method
    def CloseJob(self, request, context):
        name = _check_name(request.job, "job")
        with self._jobs_lock:
            if self._jobs.pop(name, None) is None:
                raise ServiceError(grpc.StatusCode.NOT_FOUND, f"job: no job {name!r}")
        return surrogate_pb2.CloseJobReply(job=name)

    @_servicer_method
    def Predict(self, request, context):
        from surrogate.base import Context, SurrogateError

        job = self._job(request.job)
        rows = self._rows(job, request.ranks)
        if len(request.history):
            L = request.lookback
            if not 1 <= L <= MAX_LOOKBACK:
                raise invalid("lookback", f"must be in 1..{MAX_LOOKBACK}, got {L}")
            if not len(request.ranks) and len(request.history) % L == 0:
                n = len(request.history) // L          # a context of any rows, e.g. a subset of the ranks
                rows = rows if n == job.ranks else None
            if rows is not None and len(request.history) != len(rows) * L:
                raise invalid("history", f"expected len(ranks) x lookback = {len(rows)} x {L} = {len(rows) * L} "
                                         f"values, got {len(request.history)}")
            history = np.array(request.history, dtype=np.float64).reshape(-1, L)
            bad = np.flatnonzero(~np.isnan(history.ravel()) & ~(np.isfinite(history.ravel()) & (history.ravel() > 0)))
            if len(bad):
                i = int(bad[0])
                raise invalid(f"history[{i}]", f"{history.ravel()[i]!r}: iteration times must be finite and > 0 "
                                               "(NaN = missing)")
        else:
            L = request.lookback or max(1, int(self.model.lookback))
            if L > MAX_LOOKBACK:
                raise invalid("lookback", f"must be in 1..{MAX_LOOKBACK}, got {L}")
            if len(rows) * L * 8 > self.max_state_bytes:
                raise over_limit("lookback", f"{len(rows)} ranks x {L} iterations x 8 bytes",
                                 f"{self.max_state_bytes} bytes", "--max-state-mb")
            with job.lock:
                if job.truth is None:
                    raise ServiceError(grpc.StatusCode.FAILED_PRECONDITION,
                                       f"history: empty, and the server holds no ground truth for job {job.name!r}")
                history = job.history(rows, L)
        history_field = "history" if len(request.history) else "history (the server's truth for the job)"
        if np.isnan(history).all():
            raise invalid(history_field, "every value is NaN (missing): nothing to predict from")
        graphs = self._graphs(request, job, "graphs")
        n = history.shape[0]
        if len(request.rank_port):
            if len(request.rank_port) != n:
                raise invalid("rank_port", f"{len(request.rank_port)} values for {n} history rows")
            rank_port = np.array(request.rank_port, dtype=np.int64)
            limit = len(job.mask) if job.mask is not None else (graphs.shape[1] if graphs is not None else None)
            bad = np.flatnonzero((rank_port < 0) | ((rank_port >= limit) if limit is not None else False))
            if len(bad):
                i = int(bad[0])
                raise invalid(f"rank_port[{i}]", f"port {rank_port[i]} out of range"
                                                 + (f" [0, {limit})" if limit is not None else ""))
        elif job.rank_port is not None and rows is not None:
            rank_port = job.rank_port[rows]
        else:
            rank_port = None
        ctx = Context(job=job.name, workload=job.workload, history=history, graphs=graphs, mask=job.mask,
                      rank_port=rank_port, iteration=request.iteration if request.iteration >= 0 else None)
        self._model_lock.acquire_read()
        try:
            version = self.version
            out = self.model.predict(ctx)
        except SurrogateError as exc:
            field_name = "graphs" if graphs is None and self.model.needs_graphs else "model"
            raise ServiceError(grpc.StatusCode.INVALID_ARGUMENT, f"{field_name}: {exc}") from None
        finally:
            self._model_lock.release_read()
        out = np.asarray(out, dtype=np.float64).reshape(-1)
        if out.shape != (n,):
            raise ServiceError(grpc.StatusCode.INTERNAL,
                               f"model {self.model.name!r} returned {out.shape[0]} values for {n} ranks")
        bad = np.flatnonzero(~np.isfinite(out))
        if len(bad):        # never answer NaN with OK: the client's all-NaN row, or the model's fault
            i = int(bad[0])
            if np.isnan(history[i]).all():
                raise invalid(history_field, f"row {i} has no measured value (all NaN) and model "
                                             f"{self.model.name!r} cannot predict it")
            raise ServiceError(grpc.StatusCode.INTERNAL, f"model {self.model.name!r} returned {out[i]!r} for row {i}")
        with self._stats_lock:
            self.predict_calls += 1
            self.predictions += n
        return surrogate_pb2.PredictReply(durations=out.tolist(), model_version=version)

    @_servicer_method
    def Tune(self, request, context):
        from surrogate.base import SurrogateError

        job = self._job(request.job)
        rows = self._rows(job, request.ranks)
        W = request.window
        if not 1 <= W <= self.max_truth_iterations:
            raise invalid("window", f"must be in 1..{self.max_truth_iterations} (--max-history), got {W}")
        if not 0 <= request.first_iteration <= MAX_ITERATION - W:
            raise invalid("first_iteration", f"must be in 0..{MAX_ITERATION - W}, got {request.first_iteration}")
        if len(request.durations) != len(rows) * W:
            raise invalid("durations", f"expected len(ranks) x window = {len(rows)} x {W} = {len(rows) * W} values, "
                                       f"got {len(request.durations)}")
        y = np.array(request.durations, dtype=np.float64).reshape(len(rows), W)
        bad = np.flatnonzero(~np.isnan(y.ravel()) & ~(np.isfinite(y.ravel()) & (y.ravel() > 0)))
        if len(bad):
            i = int(bad[0])
            raise invalid(f"durations[{i}]", f"{y.ravel()[i]!r}: ground truth must be finite and > 0 (NaN = unknown)")
        if np.isnan(y).all():  # nothing to learn: the model and its version stay as they are
            raise invalid("durations", f"every value is NaN (unknown): a {'fit' if request.fit else 'tune'} needs "
                                       f"at least one measured iteration time")
        graphs = self._graphs(request, job, "graphs", n=W)
        first = int(request.first_iteration)
        self._check_state_budget(job, first, W, graphs)
        with job.lock:
            idx = job.add_truth(rows, first, y, self.max_truth_iterations)
            if graphs is not None:
                for k in range(W):
                    job.graphs[first + k] = graphs[k].copy()
            keep = set(range(job.first + job.truth.shape[1] - self.max_graph_iterations,
                             job.first + job.truth.shape[1]))
            for it in [it for it in job.graphs if it not in keep]:
                del job.graphs[it]
            T = job.truth.shape[1]
            iterations = np.arange(job.first, job.first + T)
            g = None
            if job.graphs:
                Tg = min(T, self.max_graph_iterations)
                P, F = next(iter(job.graphs.values())).shape
                g = np.full((Tg, P, F), np.nan, dtype=np.float32)
                for k, it in enumerate(iterations[T - Tg:]):
                    if int(it) in job.graphs:
                        g[k] = job.graphs[int(it)]
            ds = JobDataset(job.name, job.workload, job.truth.copy(), iterations,
                            None if g is None else TailGraphs(g, T), job.mask, job.rank_port)
            if g is not None and self.model.needs_graphs:
                # target t reads the graphs of columns t - graph_lookback .. t - 1: only those held
                idx = idx[idx - self.model.graph_lookback >= ds.x.offset]
            n_truth = job.n_truth
        self._model_lock.acquire_write()
        try:
            report = (self.model.fit(ds, idx) if request.fit else self.model.tune(ds, idx)) or {}
            self.version += 1
            version = self.version
        except SurrogateError as exc:
            raise ServiceError(grpc.StatusCode.INVALID_ARGUMENT, f"model: {exc}") from None
        finally:
            self._model_lock.release_write()
        with self._stats_lock:
            self.tune_calls += 1
        metrics = {str(k): float(v) for k, v in report.items()
                   if isinstance(v, (int, float, np.number)) and not isinstance(v, bool) and math.isfinite(float(v))}
        return surrogate_pb2.TuneReply(model_version=version, metrics=metrics, truth_values=n_truth)

    @_servicer_method
    def Status(self, request, context):
        with self._jobs_lock:
            jobs = list(self._jobs.values())
        truth = 0
        for j in jobs:
            with j.lock:
                truth += j.n_truth
        try:
            cfg = json.dumps(self.model.config(), sort_keys=True, default=str)
        except Exception:  # noqa: BLE001
            cfg = "{}"
        with self._stats_lock:
            return surrogate_pb2.StatusReply(
                model=str(self.model.name), config_json=cfg, model_version=self.version,
                lookback=int(self.model.lookback), needs_graphs=bool(self.model.needs_graphs),
                jobs=len(jobs), truth_values=truth, predictions=self.predictions, predict_calls=self.predict_calls,
                tune_calls=self.tune_calls, in_flight=self.limiter.in_flight if self.limiter else 0,
                max_in_flight=self.limiter.limit if self.limiter else 0, job_names=sorted(j.name for j in jobs))

    @_servicer_method
    def Save(self, request, context):
        if self.save_dir is None:
            raise ServiceError(grpc.StatusCode.FAILED_PRECONDITION,
                               "saving is disabled: the server was started without a save directory (--save-dir)")
        name = request.name
        if not name or len(name) > MAX_NAME or not re.fullmatch(r"[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*", name) \
                or any(part in (".", "..") for part in name.split("/")):
            raise invalid("name", "must be a relative path of letters, digits, '.', '_', '-' (no '..')")
        path = (self.save_dir / name).resolve()
        if self.save_dir not in path.parents:
            raise invalid("name", "must stay inside the server's save directory")
        if any(p.exists() and not p.is_dir() for p in path.parents if self.save_dir in p.parents):
            raise invalid("name", f"a parent of {name!r} in the save directory is a file")
        if path.exists() or path.is_symlink():
            raise ServiceError(grpc.StatusCode.ALREADY_EXISTS,
                               f"name: {name!r} already exists in the save directory; choose another name")
        self._model_lock.acquire_write()
        try:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.mkdir()            # exclusive: two Saves of one name cannot both write
            except FileExistsError:
                raise ServiceError(grpc.StatusCode.ALREADY_EXISTS,
                                   f"name: {name!r} already exists in the save directory; choose another name") \
                    from None
            except NotADirectoryError:
                raise invalid("name", f"a parent of {name!r} in the save directory is a file") from None
            self.model.save(path)
            version = self.version
        finally:
            self._model_lock.release_write()
        return surrogate_pb2.SaveReply(path=str(path), model_version=version)


class SurrogateServer:
    """A ``Surrogate`` service around ``model`` (plus health and reflection). ``start()`` returns the bound
    address; use as a context manager in tests."""

    def __init__(self, model, address: str = "127.0.0.1:0", *, max_workers: int = 16, max_in_flight: int = 64,
                 max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES, save_dir=None, max_jobs: int = DEFAULT_MAX_JOBS,
                 max_truth_iterations: int = DEFAULT_MAX_HISTORY, max_graph_iterations: int = 32,
                 max_ranks: int = DEFAULT_MAX_RANKS, max_state_bytes: int = DEFAULT_MAX_STATE_BYTES):
        if max_in_flight < 1 or max_workers < 1:
            raise ValueError("max_in_flight and max_workers must be >= 1")
        self.model = model
        self.limiter = InFlightLimiter(max_in_flight, [SERVICE_NAME], exempt=[f"/{SERVICE_NAME}/Status"])
        self.servicer = SurrogateServicer(model, save_dir=save_dir, max_jobs=max_jobs,
                                          max_truth_iterations=max_truth_iterations,
                                          max_graph_iterations=max_graph_iterations, limiter=self.limiter,
                                          max_ranks=max_ranks, max_state_bytes=max_state_bytes)
        # ``max_workers`` threads run requests (+4 so probes get a thread). In flight = running + queued for a
        # thread: the limiter refuses Surrogate calls beyond ``max_in_flight`` running ones, and grpc itself refuses
        # (RESOURCE_EXHAUSTED) anything beyond ``max_in_flight`` + 4 accepted RPCs, so the queue is bounded too.
        self._pool = futures.ThreadPoolExecutor(max_workers=max_workers + 4, thread_name_prefix="surrogate-rpc")
        self.server = grpc.server(self._pool, interceptors=[self.limiter],
                                  options=server_options(max_message_bytes),
                                  maximum_concurrent_rpcs=max_in_flight + 4)
        # undecodable requests: INVALID_ARGUMENT, not grpc's INTERNAL
        add_unary_servicer(self.server, self.servicer, surrogate_pb2.DESCRIPTOR.services_by_name["Surrogate"],
                           surrogate_pb2)
        self.health = add_health_and_reflection(self.server, [SERVICE_NAME])
        self.address = bind(self.server, address)

    def start(self) -> str:
        self.server.start()
        return self.address

    def stop(self, grace: float | None = 2.0) -> None:
        self.health.enter_graceful_shutdown()
        self.server.stop(grace).wait()
        self._pool.shutdown(wait=True)

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop(0)
