"""Client of the ``hybridsim.v1.Surrogate`` service.

:class:`RemoteSurrogate` is a :class:`surrogate.base.Surrogate`: ``predict(ctx)`` and ``tune(dataset, window_idx)``
run on the server, so a controller can use a model living on another machine exactly like a local one. Jobs are
declared on the server on first use (and again if the server lost them, e.g. after a restart). The explicit calls
(:meth:`open_job`, :meth:`predict_times`, :meth:`tune_window`, :meth:`status`, :meth:`save_remote`) map one to one onto
the RPCs.

Errors: the server's refusals come back as :class:`RemoteError` (a :class:`surrogate.base.SurrogateError`) with the
gRPC ``code`` and the server's message, which names the offending field. ``RESOURCE_EXHAUSTED`` (server busy; the
request did not run) is retried ``retries`` times with back-off before it is raised. One client may be shared by
threads.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

import grpc
import numpy as np

from surrogate.base import Context, Surrogate, SurrogateError, check_kwargs
from surrogate.registry import register

from ._common import DEFAULT_MAX_MESSAGE_BYTES, channel_options, parse_address, to_tensor
from ._gen import surrogate_pb2, surrogate_pb2_grpc


class RemoteError(SurrogateError):
    def __init__(self, code: grpc.StatusCode, message: str):
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.details = message


@dataclass
class RemoteStatus:
    model: str
    config: dict
    model_version: int
    lookback: int
    needs_graphs: bool
    jobs: int
    truth_values: int
    predictions: int
    predict_calls: int
    tune_calls: int
    in_flight: int
    max_in_flight: int
    job_names: list[str]


def _call(fn, request, timeout, retries: int = 0):
    """One RPC; RESOURCE_EXHAUSTED (refused before it ran, so safe to repeat) is retried ``retries`` times with
    exponential back-off from 20 ms."""
    for attempt in range(retries + 1):
        try:
            return fn(request, timeout=timeout)
        except grpc.RpcError as exc:
            code = exc.code() if hasattr(exc, "code") else grpc.StatusCode.UNKNOWN
            if code == grpc.StatusCode.RESOURCE_EXHAUSTED and attempt < retries:
                time.sleep(0.02 * 2**attempt)
                continue
            raise RemoteError(code, exc.details() if hasattr(exc, "details") else str(exc)) from None


@register
class RemoteSurrogate(Surrogate):
    """A surrogate served by ``hybridsim serve --grpc ADDRESS``. Registered as ``remote`` (config
    ``{"address": "HOST:PORT"}``) once ``hybridsim.service.client`` is imported."""

    name = "remote"
    #: retries back off exponentially; waits are seconds (a day at most); messages a gRPC limit
    bounds = {"retries": 30, "timeout": 86_400, "wait_ready": 86_400, "max_message_bytes": 2**31 - 1}

    @classmethod
    def check_config(cls, config: dict) -> None:
        """Arguments only: validating a scenario does not connect to the service."""
        check_kwargs(cls, config)
        try:
            parse_address(config["address"])
        except Exception as exc:
            raise SurrogateError(f"{cls.name}: bad address {config['address']!r}: {exc}") from None

    def __init__(self, address: str, timeout: float = 60.0, max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
                 wait_ready: float | None = 10.0, retries: int = 5):
        self.address = parse_address(address)
        self.timeout = float(timeout)
        self.retries = int(retries)
        self.channel = grpc.insecure_channel(self.address, options=channel_options(max_message_bytes))
        if wait_ready:
            try:
                grpc.channel_ready_future(self.channel).result(timeout=wait_ready)
            except grpc.FutureTimeoutError:
                self.channel.close()
                raise RemoteError(grpc.StatusCode.UNAVAILABLE,
                                  f"no surrogate service at {self.address} after {wait_ready:g} s") from None
        self.stub = surrogate_pb2_grpc.SurrogateStub(self.channel)
        self._jobs: dict[str, tuple] = {}   # job -> the signature it was opened with
        self._last_job: str | None = None
        st = self.status()
        self.remote_model = st.model
        self.lookback = st.lookback
        self.needs_graphs = st.needs_graphs

    # ------------------------------------------------------------------------------------------- RPCs
    def _call(self, fn, request):
        return _call(fn, request, self.timeout, self.retries)

    def open_job(self, job: str, ranks: int, workload: str = "", rank_port=None, mask=None) -> bool:
        req = surrogate_pb2.OpenJobRequest(job=job, workload=workload or "", ranks=int(ranks))
        if rank_port is not None:
            req.rank_port.extend(np.asarray(rank_port, dtype=np.int64).tolist())
        if mask is not None:
            req.mask.CopyFrom(to_tensor(np.asarray(mask, dtype=np.bool_)))
        reply = self._call(self.stub.OpenJob, req)
        self._jobs[job] = self._signature(ranks, workload, rank_port, mask)
        return reply.replaced

    def close_job(self, job: str) -> None:
        self._jobs.pop(job, None)
        self._call(self.stub.CloseJob, surrogate_pb2.CloseJobRequest(job=job))

    def predict_times(self, job: str, history: np.ndarray | None, ranks=None, graphs=None,
                      iteration: int | None = None, lookback: int = 0, rank_port=None) -> np.ndarray:
        """Next iteration time of ``ranks`` of ``job``; ``history`` (len(ranks), L) or None to use the truth the
        server holds. Without ``ranks``: the history's rows (all ranks of the job if it has one row per rank)."""
        req = surrogate_pb2.PredictRequest(job=job, iteration=-1 if iteration is None else int(iteration))
        if ranks is not None:
            req.ranks.extend(np.asarray(ranks, dtype=np.int64).tolist())
        if rank_port is not None:
            req.rank_port.extend(np.asarray(rank_port, dtype=np.int64).tolist())
        if history is not None:
            h = np.asarray(history, dtype=np.float64)
            if h.ndim != 2:
                raise SurrogateError(f"history must be (ranks, lookback), got shape {h.shape}")
            req.lookback = h.shape[1]
            req.history.extend(h.ravel().tolist())
        else:
            req.lookback = int(lookback)
        if graphs is not None:
            g = np.asarray(graphs)
            req.graphs.CopyFrom(to_tensor(g if g.dtype in (np.float32, np.float64) else g.astype(np.float32)))
        reply = self._call(self.stub.Predict, req)
        return np.array(reply.durations, dtype=np.float64)

    def tune_window(self, job: str, durations: np.ndarray, first_iteration: int, ranks=None, graphs=None) -> dict:
        y = np.asarray(durations, dtype=np.float64)
        if y.ndim != 2:
            raise SurrogateError(f"durations must be (ranks, window), got shape {y.shape}")
        req = surrogate_pb2.TuneRequest(job=job, first_iteration=int(first_iteration), window=y.shape[1])
        req.durations.extend(y.ravel().tolist())
        if ranks is not None:
            req.ranks.extend(np.asarray(ranks, dtype=np.int64).tolist())
        if graphs is not None:
            req.graphs.CopyFrom(to_tensor(np.asarray(graphs, dtype=np.float32)))
        reply = self._call(self.stub.Tune, req)
        return {"model_version": reply.model_version, "truth_values": reply.truth_values, **dict(reply.metrics)}

    def status(self) -> RemoteStatus:
        r = self._call(self.stub.Status, surrogate_pb2.StatusRequest())
        return RemoteStatus(r.model, json.loads(r.config_json or "{}"), r.model_version, r.lookback, r.needs_graphs,
                            r.jobs, r.truth_values, r.predictions, r.predict_calls, r.tune_calls, r.in_flight,
                            r.max_in_flight, list(r.job_names))

    def save_remote(self, name: str) -> str:
        """Save the server's model as checkpoint ``name`` in its save directory; returns the server-side path."""
        return self._call(self.stub.Save, surrogate_pb2.SaveRequest(name=name)).path

    # ------------------------------------------------------------------------------------------- Surrogate API
    def config(self) -> dict:
        return {"address": self.address}

    @staticmethod
    def _signature(ranks, workload, rank_port, mask):
        return (int(ranks), workload or "",
                None if rank_port is None else np.asarray(rank_port, dtype=np.int64).tobytes(),
                None if mask is None else np.asarray(mask, dtype=np.bool_).tobytes())

    def _ensure_job(self, job, ranks, workload, rank_port=None, mask=None) -> None:
        sig = self._signature(ranks, workload, rank_port, mask)
        if self._jobs.get(job) != sig:
            self.open_job(job, ranks, workload, rank_port, mask)

    def _retry_lost(self, job, fn, reopen):
        try:
            return fn()
        except RemoteError as exc:
            if exc.code != grpc.StatusCode.NOT_FOUND:
                raise
            reopen()   # the server lost the job (restart): declare it again once
            return fn()

    def predict(self, ctx: Context) -> np.ndarray:
        """The server's ``model.predict`` on exactly this context (history, graphs, mask, rank_port, iteration).
        The context may hold any subset of the job's ranks: its rows and ports are sent as they are."""
        h = np.asarray(ctx.history, dtype=np.float64)
        self._last_job = ctx.job
        known = self._jobs.get(ctx.job)
        mask_sig = None if ctx.mask is None else np.asarray(ctx.mask, dtype=np.bool_).tobytes()
        if known is None or known[1] != (ctx.workload or "") or known[3] != mask_sig:
            # declare (or re-declare with the new workload/mask) keeping the job's rank count if known
            n = h.shape[0] if known is None else known[0]
            rp = ctx.rank_port if ctx.rank_port is not None and len(ctx.rank_port) == n else None
            self.open_job(ctx.job, n, ctx.workload, rp, ctx.mask)

        def reopen():
            n = self._jobs.get(ctx.job, (h.shape[0],))[0]
            self.open_job(ctx.job, n, ctx.workload, None, ctx.mask)

        return self._retry_lost(ctx.job, lambda: self.predict_times(ctx.job, h, graphs=ctx.graphs,
                                                                    iteration=ctx.iteration,
                                                                    rank_port=ctx.rank_port), reopen)

    def _send_window(self, dataset, idx, job: str | None, fit: bool) -> dict:
        job = job or getattr(dataset, "job", None) or self._last_job
        if not job:
            raise SurrogateError("tune: no job (pass job=, or give the dataset a .job)")
        y = np.asarray(dataset.y, dtype=np.float64)
        idx = np.asarray(idx, dtype=np.int64).reshape(-1)
        if not len(idx):
            return {}
        iters = getattr(dataset, "iterations", None)
        iters = np.arange(y.shape[1]) if iters is None else np.asarray(iters, dtype=np.int64)
        x = getattr(dataset, "x", None)
        workload = getattr(dataset, "workload", "") or ""
        rank_port, mask = getattr(dataset, "rank_port", None), getattr(dataset, "mask", None)
        self._ensure_job(job, y.shape[0], workload, rank_port, mask)
        report: dict = {}
        for run in np.split(idx, np.flatnonzero(np.diff(idx) != 1) + 1):
            win = y[:, run]                           # NaN (predicted / not run) = unknown on the server too
            if np.isnan(win).all():                   # no truth in it: the server refuses such a window
                continue
            g = np.asarray(x)[run] if x is not None and np.asarray(x).shape[0] == y.shape[1] else None
            req = surrogate_pb2.TuneRequest(job=job, first_iteration=int(iters[run[0]]), window=len(run), fit=fit)
            req.durations.extend(win.ravel().tolist())
            if g is not None:
                req.graphs.CopyFrom(to_tensor(g.astype(np.float32)))
            reopen = lambda: self.open_job(job, y.shape[0], workload, rank_port, mask)  # noqa: E731
            reply = self._retry_lost(job, lambda: self._call(self.stub.Tune, req), reopen)
            report = {"model_version": reply.model_version, "truth_values": reply.truth_values,
                      **dict(reply.metrics)}
        return report

    def fit(self, dataset, train_idx, val_idx=None, job: str | None = None, **kw) -> dict:
        """``model.fit`` on the server, on the truth ``dataset.y[:, train_idx]`` (sent as in :meth:`tune`)."""
        return self._send_window(dataset, train_idx, job, fit=True)

    def tune(self, dataset, window_idx, job: str | None = None, **kw) -> dict:
        """Send the ground truth ``dataset.y[:, window_idx]`` (NaN = unknown) and tune the server's model on it. The
        job is ``job``, else ``dataset.job``, else the last job predicted; a column's iteration is
        ``dataset.iterations[col]`` if the dataset has iterations, else the column index. The server holds the
        job's truth, so the model sees the same table as in-process as long as every window was sent. A
        non-contiguous window is sent as contiguous runs (one tune call each)."""
        return self._send_window(dataset, window_idx, job, fit=False)

    def save(self, path) -> None:
        raise SurrogateError("a RemoteSurrogate's model lives on the server: use save_remote(name), which writes "
                             "the checkpoint into the server's --save-dir")

    def close(self) -> None:
        self.channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
