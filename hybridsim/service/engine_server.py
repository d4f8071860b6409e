"""``hybridsim.v1.Engine``: the embedded engine behind gRPC, with the controller on the client side.

One bidirectional ``Run`` stream is one simulation (see ``protos/hybridsim/v1/engine.proto``). The server runs the
engine in a thread; the engine's callbacks are turned into stream messages:

* ``on_record`` / ``on_samples`` are buffered and sent in batches (``Records``, ``Samples``), keeping their order;
* ``director.mode_for`` / ``director.predict`` first flush every pending batch, then send a ``ModeCall`` /
  ``PredictCall`` and block until the client's ``ModeAnswer`` / ``PredictAnswer`` -- so the client's director sees
  exactly the records it would see in-process and a run gives the same records as in-process for the same seed.

A client that cancels, disconnects, half-closes or passes its gRPC deadline stops the run whatever the engine is doing
(building the workloads, between events, waiting for the client: its :class:`~hybridsim.engine.core.RunStop` is
cancelled and checked every few events), and the run slot is freed as the engine thread ends; the scenario's
``limits.deadline`` ends it the same way (``DEADLINE_EXCEEDED``). At most ``max_runs`` runs are active; more get
``RESOURCE_EXHAUSTED``. A stream must send its Start within ``start_timeout`` seconds, and at most ``max_pending``
streams wait for theirs at once (a new one evicts the longest waiting), so idle streams cannot hold the server. A bad scenario or a malformed answer is ``INVALID_ARGUMENT`` naming the field; a client that
does not answer within ``answer_timeout`` seconds gets ``DEADLINE_EXCEEDED``; an engine failure is ``INTERNAL``.

Before anything is built, ``Start`` is checked by :mod:`.scenario_guard`: text size and YAML shape, run size
(``limits``: ranks, terminals, ports, iterations, events; INVALID_ARGUMENT), and custom workload modules and files
against ``access`` (the operator's ``--allow-module`` / ``--allow-dir``; default nothing; PERMISSION_DENIED).

The engine is built by ``engine_factory(scenario)`` (default: ``hybridsim.engine.Engine(scenario, progress=False)``),
so tests can put any object with the engine's ``run(director, on_record, on_samples)`` behind the service.
"""

from __future__ import annotations

import collections
import itertools
import json
import logging
import queue
import threading
import time
import uuid
from concurrent import futures
from pathlib import Path

import grpc
import numpy as np

from hybridsim_common.backend import Director
from ..engine.core import LimitExceeded, RunStop
from ._common import (DEFAULT_MAX_MESSAGE_BYTES, Access, ServiceError, add_health_and_reflection, bind, server_options,
                      to_tensor)
from ._gen import engine_pb2, engine_pb2_grpc
from .limits import DEFAULT_MAX_PENDING, DEFAULT_START_TIMEOUT, ScenarioLimits
from .scenario_guard import check_scenario_limits, confine_scenario, yaml_limits

log = logging.getLogger(__name__)

SERVICE_NAME = engine_pb2.DESCRIPTOR.services_by_name["Engine"].full_name
DEFAULT_RECORD_BATCH = 2048
MAX_RECORD_BATCH = 65536
#: a Samples message is sent once this many bytes of blocks are pending
SAMPLES_BATCH_BYTES = 4 * 1024 * 1024
#: a final ports block is cut into messages of at most this many bytes
FINAL_CHUNK_BYTES = 16 * 1024 * 1024


def default_engine_factory(scenario):
    from hybridsim.engine import Engine

    return Engine(scenario, progress=False)


class _Cancelled(BaseException):
    """Raised inside the engine thread to stop a run whose client went away (BaseException, so that an engine's
    ``except Exception`` cannot swallow it)."""


class _Failure:
    def __init__(self, code: grpc.StatusCode, message: str):
        self.code, self.message = code, message


_END = object()


def _jsonable(o):
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, (set, tuple)):
        return list(o)
    if isinstance(o, Path):
        return str(o)
    return repr(o)


def _dumps(obj) -> str:
    if obj is None:
        return ""
    try:
        return json.dumps(obj, default=_jsonable)
    except (TypeError, ValueError):
        return json.dumps(repr(obj))


def parse_start(start, filename: str = "<remote scenario>", limits: ScenarioLimits | None = None,
                access: Access | None = None):
    """The scenario a ``Start`` message describes, checked against ``limits`` and ``access`` (default: the default
    limits, nothing allowed) without building anything; ``ServiceError`` if it is refused. Call
    :func:`check_start_files` next (it builds topology and placement)."""
    from hybridsim.scenario import ScenarioError, parse_scenario

    limits = limits or ScenarioLimits()
    access = access or Access()
    if not start.scenario_yaml.strip():
        raise ServiceError(grpc.StatusCode.INVALID_ARGUMENT, "start.scenario_yaml: required")
    if start.record_batch > MAX_RECORD_BATCH:
        raise ServiceError(grpc.StatusCode.INVALID_ARGUMENT,
                           f"start.record_batch: {start.record_batch} is more than {MAX_RECORD_BATCH}")
    if start.has_seed and start.seed > 2**63 - 1:
        raise ServiceError(grpc.StatusCode.INVALID_ARGUMENT, f"start.seed: {start.seed} is too large")
    base = None
    if start.base_dir:
        base = Path(start.base_dir)
        if not base.is_absolute():
            raise ServiceError(grpc.StatusCode.INVALID_ARGUMENT, "start.base_dir: must be an absolute path")
    try:
        scenario = parse_scenario(start.scenario_yaml, filename, yaml_limits=yaml_limits(limits))
        if start.has_seed:
            scenario.seed = int(start.seed)
    except ScenarioError as exc:
        raise ServiceError(grpc.StatusCode.INVALID_ARGUMENT, f"start.scenario_yaml: {exc}") from None
    except (ValueError, RecursionError) as exc:  # pydantic assignment validation
        raise ServiceError(grpc.StatusCode.INVALID_ARGUMENT, f"start: {type(exc).__name__}: {exc}") from None
    check_scenario_limits(scenario, limits)
    # paths become absolute and ``provenance.path`` stays unset: the server reads no file in base_dir that was not allowed
    confine_scenario(scenario, access, base)
    return scenario


def check_start_files(scenario, start, filename: str = "<remote scenario>") -> None:
    """Build topology and placement (sizes already checked); INVALID_ARGUMENT naming the field if they fail."""
    from hybridsim.scenario import ScenarioError, check_scenario_files

    try:
        check_scenario_files(scenario, filename, start.scenario_yaml)
    except (ScenarioError, ValueError) as exc:
        raise ServiceError(grpc.StatusCode.INVALID_ARGUMENT, f"start.scenario_yaml: {exc}") from None


class _Session:
    """One run: the engine thread's side (callbacks, director proxy) and the stream's side (queues)."""

    def __init__(self, start, scenario, answer_timeout: float, max_sample_bytes: int):
        self.id = uuid.uuid4().hex[:12]
        self.max_sample_bytes = max_sample_bytes
        self.sample_bytes = 0
        self.start = start
        self.scenario = scenario
        self.answer_timeout = answer_timeout
        self.out: queue.Queue = queue.Queue(maxsize=64)
        self.answers: queue.Queue = queue.Queue()
        self.cancelled = threading.Event()
        # checked by the engine while it builds the workloads and as it runs: the scenario's limits.deadline, and
        # cancel() when the client goes away (its call ended, was cancelled or passed its gRPC deadline)
        self.stop = RunStop(scenario.limits.deadline)
        self.finished = threading.Event()
        self._ids = itertools.count(1)
        self.record_batch = start.record_batch or DEFAULT_RECORD_BATCH
        self._recs: list = []          # pending (record, simulated)
        self._blocks: list = []        # pending PortSamples
        self._block_bytes = 0
        self.streamed_records: list = []
        self.streamed_simulated: list = []
        self.streamed_blocks: list = []
        self.director_calls = 0

    def cancel(self) -> None:
        """Stop the run: the engine thread raises at its next check or callback (callable from any thread)."""
        self.cancelled.set()
        self.stop.cancel(_Cancelled())

    # ------------------------------------------------------------------------------------- engine-thread side
    def _check(self) -> None:
        if self.cancelled.is_set():
            raise _Cancelled()

    def put(self, msg) -> None:
        while True:
            self._check()
            try:
                self.out.put(msg, timeout=0.2)
                return
            except queue.Full:
                continue

    def on_record(self, record, simulated) -> None:
        self._check()
        if self._blocks:
            self._flush_blocks()
        self._recs.append((record, bool(simulated)))
        self.streamed_records.append(record)
        self.streamed_simulated.append(bool(simulated))
        if len(self._recs) >= self.record_batch:
            self._flush_records()

    def count_samples(self, block) -> None:
        """Every port sample block the engine keeps passes here, streamed or not: the run stops past the limit."""
        self._check()
        self.sample_bytes += block.values.nbytes
        if self.sample_bytes > self.max_sample_bytes:
            raise ServiceError(grpc.StatusCode.RESOURCE_EXHAUSTED,
                               f"start.scenario_yaml: sampling: the run's port samples passed this server's limit of "
                               f"{self.max_sample_bytes >> 20} MiB (--max-samples-mb); sample less often "
                               f"(sampling.interval) or turn them off (sampling.ports: false)")

    def on_samples(self, block) -> None:
        self.count_samples(block)
        if self._recs:
            self._flush_records()
        self._blocks.append(block)
        self.streamed_blocks.append(block)
        self._block_bytes += block.values.nbytes
        if self._block_bytes >= SAMPLES_BATCH_BYTES:
            self._flush_blocks()

    def flush(self) -> None:
        if self._recs:
            self._flush_records()
        if self._blocks:
            self._flush_blocks()

    @staticmethod
    def records_message(pairs, final: bool = False):
        names: dict[str, int] = {}
        job_idx = [names.setdefault(r.job, len(names)) for r, _ in pairs]
        return engine_pb2.EngineEvent(records=engine_pb2.Records(
            jobs=list(names), job=job_idx, job_id=[r.job_id for r, _ in pairs], rank=[r.rank for r, _ in pairs],
            iteration=[r.iteration for r, _ in pairs], start=[r.start for r, _ in pairs],
            end=[r.end for r, _ in pairs], simulated=[s for _, s in pairs], final=final))

    @staticmethod
    def block_message(block):
        return engine_pb2.SampleBlock(t_end=np.asarray(block.t_end, dtype=np.float64).tolist(),
                                      interval=float(block.interval), radix=int(block.radix),
                                      features=list(block.features), values=to_tensor(block.values.astype(np.float32)),
                                      meta_json=_dumps(block.meta or {}))

    def _flush_records(self) -> None:
        pairs, self._recs = self._recs, []
        self.put(self.records_message(pairs))

    def _flush_blocks(self) -> None:
        blocks, self._blocks, self._block_bytes = self._blocks, [], 0
        self.put(engine_pb2.EngineEvent(samples=engine_pb2.Samples(blocks=[self.block_message(b) for b in blocks])))

    def call(self, event, expect: str):
        """Send a director call and wait for its answer (``expect`` = the answer's oneof name)."""
        self.flush()
        call_id = next(self._ids)
        getattr(event, event.WhichOneof("msg")).call_id = call_id
        self.director_calls += 1
        self.put(event)
        deadline = time.monotonic() + self.answer_timeout
        while True:
            self._check()
            try:
                req = self.answers.get(timeout=0.2)
            except queue.Empty:
                if time.monotonic() > deadline:
                    raise ServiceError(grpc.StatusCode.DEADLINE_EXCEEDED,
                                       f"{expect}: no answer to call {call_id} within {self.answer_timeout:g} s")
                continue
            if req is _END:
                self.cancel()
                raise _Cancelled()
            kind = req.WhichOneof("msg")
            if kind != expect:
                raise ServiceError(grpc.StatusCode.INVALID_ARGUMENT,
                                   f"{kind or 'message'}: expected a {expect} to call {call_id}")
            ans = getattr(req, kind)
            if ans.call_id != call_id:
                raise ServiceError(grpc.StatusCode.INVALID_ARGUMENT,
                                   f"{expect}.call_id: expected {call_id}, got {ans.call_id}")
            return ans


class _ProxyDirector(Director):
    """The engine's director; every call is answered by the client's director."""

    def __init__(self, session: _Session):
        self.session = session
        self.keep_background = bool(session.start.keep_background)

    def mode_for(self, job_id: int, iteration: int):
        from hybridsim_common.backend import Mode

        ans = self.session.call(engine_pb2.EngineEvent(mode_call=engine_pb2.ModeCall(
            job_id=int(job_id), iteration=int(iteration))), "mode_answer")
        if ans.mode == engine_pb2.MODE_SIMULATE:
            return Mode.SIMULATE
        if ans.mode == engine_pb2.MODE_PREDICT:
            return Mode.PREDICT
        raise ServiceError(grpc.StatusCode.INVALID_ARGUMENT, f"mode_answer.mode: must be MODE_SIMULATE or "
                                                             f"MODE_PREDICT, got {ans.mode}")

    def predict(self, job_id: int, iteration: int, ranks, starts) -> np.ndarray:
        ranks = np.asarray(ranks)
        ans = self.session.call(engine_pb2.EngineEvent(predict_call=engine_pb2.PredictCall(
            job_id=int(job_id), iteration=int(iteration), ranks=ranks.astype(np.int64).tolist(),
            starts=np.asarray(starts, dtype=np.float64).tolist())), "predict_answer")
        d = np.array(ans.durations, dtype=np.float64)
        if d.shape != (len(ranks),):
            raise ServiceError(grpc.StatusCode.INVALID_ARGUMENT,
                               f"predict_answer.durations: expected {len(ranks)} values (one per rank), got {len(d)}")
        bad = np.flatnonzero(~(np.isfinite(d) & (d >= 0)))
        if len(bad):
            i = int(bad[0])
            raise ServiceError(grpc.StatusCode.INVALID_ARGUMENT,
                               f"predict_answer.durations[{i}]: {d[i]!r} is not a finite duration >= 0")
        return d


class EngineServicer(engine_pb2_grpc.EngineServicer):
    def __init__(self, engine_factory=None, max_runs: int = 4, answer_timeout: float = 600.0,
                 limits: ScenarioLimits | None = None, access: Access | None = None,
                 start_timeout: float = DEFAULT_START_TIMEOUT, max_pending: int = DEFAULT_MAX_PENDING):
        self.engine_factory = engine_factory or default_engine_factory
        self.start_timeout = float(start_timeout)
        self.max_pending = int(max_pending)
        self._pending: collections.OrderedDict = collections.OrderedDict()  # streams waiting for Start -> context
        self.limits = limits or ScenarioLimits()
        self.access = access or Access()
        self.max_runs = int(max_runs)
        self.answer_timeout = float(answer_timeout)
        self._lock = threading.Lock()
        self.sessions: dict[str, _Session] = {}
        self.total_runs = 0
        self.threads: list[threading.Thread] = []
        self.shutting_down = False

    def Status(self, request, context):
        with self._lock:
            return engine_pb2.EngineStatusReply(active_runs=len(self.sessions), total_runs=self.total_runs,
                                                max_runs=self.max_runs)

    # ------------------------------------------------------------------------------------- the stream
    def Run(self, request_iterator, context):
        first = self._first_message(request_iterator, context)
        if first is None:
            return
        if first.WhichOneof("msg") != "start":
            context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                          f"start: the first message must be a Start, got {first.WhichOneof('msg')}")
        failure = None
        try:
            scenario = parse_start(first.start, limits=self.limits, access=self.access)
        except ServiceError as exc:
            failure = (exc.code, str(exc))
        except Exception as exc:  # noqa: BLE001 - a server must answer, not die
            log.exception("Start failed")
            failure = (grpc.StatusCode.INTERNAL, f"start: {type(exc).__name__}: {exc}")
        if failure:
            context.abort(*failure)
        session = _Session(first.start, scenario, self.answer_timeout, self.limits.max_sample_bytes)
        with self._lock:        # the run slot is taken before topology and placement are built
            if len(self.sessions) >= self.max_runs:
                session = None
            else:
                self.sessions[session.id] = session
                self.total_runs += 1
        if session is None:
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                          f"the engine server already runs {self.max_runs} simulations; retry later")
        # from here the slot is the session's: a client that goes away (or passes its gRPC deadline) stops the run,
        # whatever it is doing, and the slot is freed when the engine thread ends
        if not context.add_callback(session.cancel):  # the call already ended
            session.cancel()
        try:
            check_start_files(scenario, first.start)
        except ServiceError as exc:
            failure = (exc.code, str(exc))
        except Exception as exc:  # noqa: BLE001
            log.exception("Start failed")
            failure = (grpc.StatusCode.INTERNAL, f"start: {type(exc).__name__}: {exc}")
        if failure:
            self._forget(session)
            context.abort(*failure)
        reader = threading.Thread(target=self._read_answers, args=(session, request_iterator),
                                  name=f"engine-answers-{session.id}", daemon=True)
        runner = threading.Thread(target=self._run_engine, args=(session,), name=f"engine-{session.id}", daemon=True)
        self.threads = [t for t in self.threads if t.is_alive()] + [runner]
        try:
            yield engine_pb2.EngineEvent(started=engine_pb2.Started(
                session=session.id, jobs=[j.name for j in scenario.jobs], seed=scenario.seed))
            reader.start()
            runner.start()
            while True:
                try:
                    item = session.out.get(timeout=0.2)
                except queue.Empty:
                    if self.shutting_down and context.is_active():
                        context.abort(grpc.StatusCode.UNAVAILABLE, "the engine server is shutting down")
                    if session.cancelled.is_set() or not context.is_active():
                        return
                    continue
                if item is _END:
                    return
                if isinstance(item, _Failure):
                    context.abort(item.code, item.message)
                yield item
        finally:
            session.cancel()
            if not runner.is_alive() and not session.finished.is_set():  # never started
                self._forget(session)

    def _first_message(self, request_iterator, context):
        """The stream's first message, or None once the stream is gone. A stream waits for it at most
        ``start_timeout`` seconds, and at most ``max_pending`` streams wait at once: a new one cancels the one that
        has waited longest (a client sends Start as it opens the stream, so only idle streams are ever evicted), so
        streams that never send Start can neither hold the RPC threads nor lock out runs."""
        key = object()
        with self._lock:
            self._pending[key] = context
            while len(self._pending) > self.max_pending:
                _k, oldest = self._pending.popitem(last=False)
                oldest.cancel()
        watchdog = threading.Timer(self.start_timeout, context.cancel)
        watchdog.daemon = True
        watchdog.start()
        try:
            return next(request_iterator)
        except StopIteration:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "start: the stream ended before a Start message")
        except grpc.RpcError:
            return None
        finally:
            watchdog.cancel()
            with self._lock:
                self._pending.pop(key, None)

    @staticmethod
    def _read_answers(session: _Session, request_iterator) -> None:
        try:
            for req in request_iterator:
                if session.cancelled.is_set():
                    break
                session.answers.put(req)
        except Exception:  # noqa: BLE001 - the client went away: grpc raises here
            pass
        finally:
            session.answers.put(_END)

    def _forget(self, session: _Session) -> None:
        session.finished.set()
        with self._lock:
            self.sessions.pop(session.id, None)

    def _run_engine(self, session: _Session) -> None:
        with session.stop.active():
            self._run_engine_stoppable(session)

    def _run_engine_stoppable(self, session: _Session) -> None:
        try:
            session.stop.check("before the engine was built")
            engine = self.engine_factory(session.scenario)
            director = _ProxyDirector(session) if session.start.director else None
            on_samples = session.on_samples if session.start.samples else session.count_samples
            result = engine.run(director=director, on_record=session.on_record, on_samples=on_samples)
            session.flush()
            self._send_done(session, result)
            session.put(_END)
        except _Cancelled:
            pass
        except ServiceError as exc:
            self._fail(session, exc.code, str(exc))
        except LimitExceeded as exc:  # the scenario's limits.deadline, samples or packets per message
            code = (grpc.StatusCode.DEADLINE_EXCEEDED if str(exc).startswith("deadline")
                    else grpc.StatusCode.RESOURCE_EXHAUSTED)
            self._fail(session, code, f"start.scenario_yaml: limits: {exc}")
        except Exception as exc:  # noqa: BLE001 - report, never kill the server
            from hybridsim.engine.engine import EngineError
            from hybridsim.workloads.base import WorkloadError

            if isinstance(exc, (EngineError, WorkloadError)):     # the scenario cannot run as given
                self._fail(session, grpc.StatusCode.INVALID_ARGUMENT, f"start.scenario_yaml: {exc}")
                return
            log.exception("engine run %s failed", session.id)
            self._fail(session, grpc.StatusCode.INTERNAL, f"engine: {type(exc).__name__}: {exc}")
        finally:
            self._forget(session)

    @staticmethod
    def _fail(session: _Session, code, message: str) -> None:
        try:
            session.put(_Failure(code, message))
        except _Cancelled:
            pass

    @staticmethod
    def _send_done(session: _Session, result) -> None:
        records_ok = (len(result.records) == len(session.streamed_records)
                      and list(result.records) == session.streamed_records
                      and [bool(s) for s in result.simulated] == session.streamed_simulated)
        if not records_ok:
            pairs = list(zip(result.records, [bool(s) for s in result.simulated]))
            for i in range(0, len(pairs), DEFAULT_RECORD_BATCH):
                session.put(session.records_message(pairs[i:i + DEFAULT_RECORD_BATCH], final=True))
        ports = result.ports
        ports_ok = False
        if ports is not None and session.streamed_blocks:
            sb = session.streamed_blocks
            same_kind = all(b.features == ports.features and b.radix == ports.radix
                            and b.interval == ports.interval and b.values.shape[1:] == ports.values.shape[1:]
                            for b in sb)
            ports_ok = (same_kind and sum(len(b.t_end) for b in sb) == len(ports.t_end)
                        and np.array_equal(np.concatenate([b.t_end for b in sb]), ports.t_end)
                        and np.array_equal(np.concatenate([b.values for b in sb]), ports.values))
        if ports is not None and not ports_ok:
            per = max(1, FINAL_CHUNK_BYTES // max(1, ports.values[:1].nbytes))
            from hybridsim_common.records import PortSamples

            for i in range(0, max(1, len(ports.t_end)), per):
                part = PortSamples(ports.t_end[i:i + per], ports.interval, ports.radix, ports.features,
                                   ports.values[i:i + per], ports.meta)
                session.put(engine_pb2.EngineEvent(samples=engine_pb2.Samples(
                    blocks=[session.block_message(part)], final=True)))
        session.put(engine_pb2.EngineEvent(done=engine_pb2.Done(
            events=int(result.events), end_time=float(result.end_time),
            job_end={str(k): float(v) for k, v in (result.job_end or {}).items()}, wall_s=float(result.wall_s),
            partial=bool(result.partial), link_totals_json=_dumps(result.link_totals),
            stats_json=_dumps(result.stats or {}), records_as_streamed=records_ok, ports_as_streamed=ports_ok,
            has_ports=ports is not None, director_calls=session.director_calls)))


class EngineServer:
    """An ``Engine`` service (plus health and reflection); ``start()`` returns the bound address."""

    def __init__(self, address: str = "127.0.0.1:0", *, engine_factory=None, max_runs: int = 4,
                 max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES, answer_timeout: float = 600.0,
                 limits: ScenarioLimits | None = None, access: Access | None = None,
                 start_timeout: float = DEFAULT_START_TIMEOUT, max_pending: int = DEFAULT_MAX_PENDING):
        self.servicer = EngineServicer(engine_factory, max_runs=max_runs, answer_timeout=answer_timeout,
                                       limits=limits, access=access, start_timeout=start_timeout,
                                       max_pending=max_pending)
        # each run holds one RPC thread (the stream), each stream waiting for its Start one more; a few more for
        # Status/health/reflection and refusals
        threads = max_runs + max_pending + 8
        self._pool = futures.ThreadPoolExecutor(max_workers=threads, thread_name_prefix="engine-rpc")
        self.server = grpc.server(self._pool, options=server_options(max_message_bytes),
                                  maximum_concurrent_rpcs=threads)
        engine_pb2_grpc.add_EngineServicer_to_server(self.servicer, self.server)
        self.health = add_health_and_reflection(self.server, [SERVICE_NAME])
        self.address = bind(self.server, address)

    def start(self) -> str:
        self.server.start()
        return self.address

    def stop(self, grace: float | None = 2.0) -> None:
        self.health.enter_graceful_shutdown()
        self.servicer.shutting_down = True
        for s in list(self.servicer.sessions.values()):
            s.cancel()
        stopped = self.server.stop(grace)
        stopped.wait()
        for t in self.servicer.threads:
            if t.ident is not None:  # a stream cancelled between Started and its threads' start never ran them
                t.join(timeout=5.0)
        self._pool.shutdown(wait=True)

    @property
    def active_runs(self) -> int:
        return len(self.servicer.sessions)

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop(0)
