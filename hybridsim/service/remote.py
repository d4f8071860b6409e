"""``RemoteBackend``: run a scenario on a remote ``hybridsim.v1.Engine`` with the controller staying here.

It has the embedded engine's ``run(director, on_record, on_samples) -> SimulationResult``: the engine runs on the
server; records and port samples arrive in batches and are handed to ``on_record`` / ``on_samples`` in the order the
engine emitted them; each ``mode_for`` / ``predict`` the engine makes is answered by the local ``director`` (after
every record emitted before it has been delivered). The run gives the same records as in-process for the same seed.

    backend = RemoteBackend("gpu-box:50052", scenario)
    result = backend.run(director=controller, on_record=cb)

Errors: a refused run raises :class:`RemoteEngineError` (``code`` is the gRPC status; INVALID_ARGUMENT for a bad
scenario, RESOURCE_EXHAUSTED when the server is busy, UNAVAILABLE when nothing listens). An exception raised by the
director or a callback cancels the remote run and propagates unchanged.
"""

from __future__ import annotations

import json
import os
import queue
import time
from pathlib import Path

import grpc
import numpy as np

from hybridsim_common.backend import Backend
from ._common import DEFAULT_MAX_MESSAGE_BYTES, channel_options, from_tensor, parse_address
from ._gen import engine_pb2, engine_pb2_grpc


class RemoteEngineError(RuntimeError):
    def __init__(self, code: grpc.StatusCode, message: str):
        super().__init__(f"remote engine: {code.name}: {message}")
        self.code = code
        self.details = message


def scenario_payload(scenario) -> tuple[str, str]:
    """(text, base_dir) to send for ``scenario``: a :class:`~hybridsim.scenario.Scenario`, a path to a YAML file,
    or YAML text. A ``Scenario`` is sent resolved (JSON is YAML) with its backend set to the embedded engine."""
    from hybridsim.scenario import Scenario, scenario_to_dict

    if isinstance(scenario, Scenario):
        d = scenario_to_dict(scenario)
        backend = d.get("backend") or {}
        backend.pop("remote", None)
        if backend.get("kind") not in (None, "embedded"):
            backend["kind"] = "embedded"
        return json.dumps(d), str(scenario.base_dir)
    if isinstance(scenario, os.PathLike) or (isinstance(scenario, str) and "\n" not in scenario
                                             and Path(scenario).is_file()):
        p = Path(scenario).resolve()
        return p.read_text(), str(p.parent)
    if isinstance(scenario, str):
        return scenario, ""
    raise TypeError(f"scenario must be a Scenario, a path or YAML text, not {type(scenario).__name__}")


def _block(msg):
    from hybridsim_common.records import PortSamples

    values = from_tensor(msg.values, "values", np.float32, ndim=3).copy()
    return PortSamples(np.array(msg.t_end, dtype=np.float64), msg.interval, msg.radix, tuple(msg.features), values,
                       json.loads(msg.meta_json) if msg.meta_json else {})


def _concat(blocks):
    from hybridsim_common.records import PortSamples

    if not blocks:
        return None
    b0 = blocks[0]
    if len(blocks) == 1:
        return b0
    return PortSamples(np.concatenate([b.t_end for b in blocks]), b0.interval, b0.radix, b0.features,
                       np.concatenate([b.values for b in blocks]), b0.meta)


class RemoteBackend(Backend):
    """The client side of the engine service; see the module docstring."""

    no_streams = ("job streams (scheduler section) run on the embedded backend: the remote engine protocol does not "
                  "carry job starts, ends and terminals yet")

    def __init__(self, address: str, scenario, *, seed: int | None = None, timeout: float | None = None,
                 record_batch: int = 0, max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
                 connect_timeout: float = 10.0):
        self.address = parse_address(address)
        self.text, self.base_dir = scenario_payload(scenario)
        self.seed = seed
        self.timeout = timeout
        self.record_batch = int(record_batch)
        self.max_message_bytes = max_message_bytes
        self.connect_timeout = connect_timeout
        self.session: str | None = None

    def _start(self, director, on_samples):
        start = engine_pb2.Start(scenario_yaml=self.text, base_dir=self.base_dir, director=director is not None,
                                 keep_background=bool(director is not None and director.keep_background),
                                 samples=on_samples is not None, record_batch=self.record_batch)
        if self.seed is not None:
            start.has_seed, start.seed = True, int(self.seed)
        return engine_pb2.EngineRequest(start=start)

    def run(self, director=None, on_record=None, on_samples=None):
        from hybridsim_common.backend import Mode, SimulationResult
        from hybridsim_common.records import IterationRecord

        t0 = time.perf_counter()
        channel = grpc.insecure_channel(self.address, options=channel_options(self.max_message_bytes))
        try:
            grpc.channel_ready_future(channel).result(timeout=self.connect_timeout)
        except grpc.FutureTimeoutError:
            channel.close()
            raise RemoteEngineError(grpc.StatusCode.UNAVAILABLE,
                                    f"no engine service at {self.address} after {self.connect_timeout:g} s") from None
        stub = engine_pb2_grpc.EngineStub(channel)
        outbox: queue.Queue = queue.Queue()
        first = self._start(director, on_samples)

        def requests():
            yield first
            while True:
                item = outbox.get()
                if item is None:
                    return
                yield item

        records, simulated, blocks, final_recs, final_simulated, final_blocks = [], [], [], [], [], []
        done = None
        call = stub.Run(requests(), timeout=self.timeout)
        try:
            for ev in call:
                kind = ev.WhichOneof("msg")
                if kind == "records":
                    r = ev.records
                    names = list(r.jobs)
                    batch = [IterationRecord(names[j], ji, rk, it, s, e) for j, ji, rk, it, s, e in
                             zip(r.job, r.job_id, r.rank, r.iteration, r.start, r.end)]
                    sims = list(r.simulated)
                    if r.final:
                        final_recs += batch
                        final_simulated += sims
                        continue
                    records += batch
                    simulated += sims
                    if on_record is not None:
                        for rec, sim in zip(batch, sims):
                            on_record(rec, sim)
                elif kind == "samples":
                    got = [_block(b) for b in ev.samples.blocks]
                    if ev.samples.final:
                        final_blocks += got
                        continue
                    blocks += got
                    if on_samples is not None:
                        for b in got:
                            on_samples(b)
                elif kind == "mode_call":
                    c = ev.mode_call
                    mode = Mode(director.mode_for(c.job_id, c.iteration))
                    outbox.put(engine_pb2.EngineRequest(mode_answer=engine_pb2.ModeAnswer(
                        call_id=c.call_id,
                        mode=engine_pb2.MODE_PREDICT if mode == Mode.PREDICT else engine_pb2.MODE_SIMULATE)))
                elif kind == "predict_call":
                    c = ev.predict_call
                    d = director.predict(c.job_id, c.iteration, np.array(c.ranks, dtype=np.int64),
                                         np.array(c.starts, dtype=np.float64))
                    outbox.put(engine_pb2.EngineRequest(predict_answer=engine_pb2.PredictAnswer(
                        call_id=c.call_id, durations=np.asarray(d, dtype=np.float64).reshape(-1).tolist())))
                elif kind == "started":
                    self.session = ev.started.session
                elif kind == "done":
                    done = ev.done
        except grpc.RpcError as exc:
            raise RemoteEngineError(exc.code(), exc.details()) from None
        except BaseException:
            call.cancel()
            raise
        finally:
            outbox.put(None)
            channel.close()
        if done is None:
            raise RemoteEngineError(grpc.StatusCode.UNKNOWN, "the stream ended without a Done message")
        if not done.records_as_streamed:
            records, simulated = final_recs, final_simulated
        ports = None
        if done.has_ports:
            ports = _concat(blocks if done.ports_as_streamed else final_blocks)
        stats = json.loads(done.stats_json) if done.stats_json else {}
        if isinstance(stats, dict):
            stats = {**stats, "remote": {"address": self.address, "session": self.session,
                                         "client_wall_s": time.perf_counter() - t0,
                                         "director_calls": int(done.director_calls)}}
        return SimulationResult(records=records, simulated=simulated, ports=ports, events=int(done.events),
                                end_time=done.end_time, job_end=dict(done.job_end), wall_s=done.wall_s,
                                partial=done.partial,
                                link_totals=json.loads(done.link_totals_json) if done.link_totals_json else None,
                                stats=stats)
