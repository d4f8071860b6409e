"""Pieces both services share: addresses, tensors on the wire, field errors, the in-flight bound, health and
reflection, and clean shutdown."""

from __future__ import annotations

import os
import re
import signal
import threading
from pathlib import Path
from typing import Iterable

import grpc
import numpy as np

from ._gen import common_pb2

DEFAULT_HOST = "127.0.0.1"
#: default limit on one message either way (a (8, 3960, 40) float32 graph stack is 5 MB)
DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024 * 1024
MAX_TENSOR_DIMS = 8
MAX_TENSOR_DIM = 2**31 - 1     # larger than any message can carry

_DTYPES = {
    common_pb2.Tensor.FLOAT32: np.dtype("<f4"),
    common_pb2.Tensor.FLOAT64: np.dtype("<f8"),
    common_pb2.Tensor.INT64: np.dtype("<i8"),
    common_pb2.Tensor.BOOL: np.dtype("?"),
}
_CODES = {v: k for k, v in _DTYPES.items()}


class ServiceError(Exception):
    """A request the service refuses: ``code`` (a :class:`grpc.StatusCode`) and a message naming the field."""

    def __init__(self, code: grpc.StatusCode, message: str):
        super().__init__(message)
        self.code = code


def invalid(field: str, msg: str) -> ServiceError:
    return ServiceError(grpc.StatusCode.INVALID_ARGUMENT, f"{field}: {msg}")


def over_limit(field: str, value, limit, flag: str) -> ServiceError:
    """A request beyond an operator limit: INVALID_ARGUMENT (not RESOURCE_EXHAUSTED, which clients retry)."""
    return invalid(field, f"{value} is more than this server's limit of {limit} ({flag})")


_MODULE = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")


class Access:
    """What a client may make the server import or read: the operator's ``--allow-module PREFIX`` (a module and its
    submodules) and ``--allow-dir DIR`` (files below it, symbolic links resolved). Default: nothing.

    Refusals are PERMISSION_DENIED with a message that depends only on the field, never on the server's files
    (whether the file exists, what it holds, where a link points)."""

    def __init__(self, modules: Iterable[str] = (), dirs: Iterable[str | os.PathLike] = ()):
        self.modules = tuple(str(m).strip() for m in modules)
        for m in self.modules:
            if not _MODULE.fullmatch(m):
                raise ValueError(f"--allow-module {m!r}: expected a dotted module name (e.g. mypkg.workloads)")
        self.dirs = tuple(Path(os.path.realpath(d)) for d in dirs)
        for d in self.dirs:
            if not d.is_dir():
                raise ValueError(f"--allow-dir {d}: not a directory")

    def module_allowed(self, module: str) -> bool:
        return any(module == m or module.startswith(m + ".") for m in self.modules)

    def path_allowed(self, path: str | os.PathLike) -> bool:
        real = Path(os.path.realpath(path))
        return any(real == d or d in real.parents for d in self.dirs)

    def check_module(self, field: str, module: str) -> None:
        if not self.module_allowed(module):
            raise ServiceError(grpc.StatusCode.PERMISSION_DENIED,
                               f"{field}: this server imports no module a client names unless its operator allowed "
                               f"it (serve --allow-module PREFIX); {module!r} is not allowed")

    def check_path(self, field: str, path: str | os.PathLike) -> None:
        if not self.path_allowed(path):
            raise ServiceError(grpc.StatusCode.PERMISSION_DENIED,
                               f"{field}: this server reads no file a client names outside the directories its "
                               f"operator allowed (serve --allow-dir DIR)")


def parse_address(text: str, default_host: str = DEFAULT_HOST) -> str:
    """``HOST:PORT``, ``[v6]:PORT``, ``:PORT`` or ``PORT`` -> ``host:port`` (host defaults to loopback)."""
    text = str(text).strip()
    if text.isdigit():
        host, port = default_host, text
    else:
        host, sep, port = text.rpartition(":")
        if not sep:
            raise ValueError(f"address {text!r}: expected HOST:PORT")
        host = host or default_host
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"address {text!r}: port must be an integer in 0..65535")
    return f"{host}:{int(port)}"


# ------------------------------------------------------------------------------------------------------ tensors
def to_tensor(a: np.ndarray) -> common_pb2.Tensor:
    a = np.asarray(a)
    if a.dtype == np.float32 or a.dtype == np.float64 or a.dtype == np.bool_:
        dt = a.dtype.newbyteorder("<") if a.dtype != np.bool_ else a.dtype
    elif np.issubdtype(a.dtype, np.integer):
        dt = np.dtype("<i8")
    else:
        raise TypeError(f"cannot send an array of dtype {a.dtype}")
    a = np.ascontiguousarray(a, dtype=dt)
    return common_pb2.Tensor(dtype=_CODES[np.dtype(dt)], shape=list(a.shape), data=a.tobytes())


def from_tensor(t: common_pb2.Tensor, field: str, dtype=None, ndim: int | None = None) -> np.ndarray:
    """Decode ``t``; raise INVALID_ARGUMENT naming ``field`` if its dtype, shape or byte count is wrong."""
    if t.dtype not in _DTYPES:
        raise invalid(f"{field}.dtype", f"unknown dtype {t.dtype}")
    dt = _DTYPES[t.dtype]
    if dtype is not None and dt != np.dtype(dtype).newbyteorder("<") and dt != np.dtype(dtype):
        raise invalid(f"{field}.dtype", f"expected {common_pb2.Tensor.DType.Name(_CODES[np.dtype(dtype)])}, "
                                        f"got {common_pb2.Tensor.DType.Name(t.dtype)}")
    shape = tuple(int(s) for s in t.shape)
    if ndim is not None and len(shape) != ndim:
        raise invalid(f"{field}.shape", f"expected {ndim} dimensions, got {list(shape)}")
    if len(shape) > MAX_TENSOR_DIMS:
        raise invalid(f"{field}.shape", f"{len(shape)} dimensions; at most {MAX_TENSOR_DIMS}")
    if any(not 0 <= s <= MAX_TENSOR_DIM for s in shape):
        raise invalid(f"{field}.shape", f"sizes must be in 0..{MAX_TENSOR_DIM}, got {list(shape)}")
    n = 1
    for s in shape:             # Python ints: a product that overflows int64 must not wrap to a matching size
        n *= s
    if len(t.data) != n * dt.itemsize:
        raise invalid(f"{field}.data", f"{len(t.data)} bytes for shape {list(shape)} of {dt} "
                                       f"(expected {n * dt.itemsize})")
    return np.frombuffer(t.data, dtype=dt).reshape(shape)


# ------------------------------------------------------------------------------------------------------ in-flight bound
class InFlightLimiter(grpc.ServerInterceptor):
    """Bound the RPCs of the given services in progress at once; the excess gets RESOURCE_EXHAUSTED at once (never
    queued). Health, reflection and the ``exempt`` methods (full names, ``/pkg.Service/Method``) are not counted, so
    a saturated server still answers probes."""

    def __init__(self, limit: int, services: Iterable[str], exempt: Iterable[str] = ()):
        self.limit = int(limit)
        self.prefixes = tuple(f"/{s}/" for s in services)
        self.exempt = frozenset(exempt)
        self._sem = threading.BoundedSemaphore(self.limit)
        self._lock = threading.Lock()
        self.in_flight = 0
        self.rejected = 0

    def _enter(self) -> bool:
        if not self._sem.acquire(blocking=False):
            with self._lock:
                self.rejected += 1
            return False
        with self._lock:
            self.in_flight += 1
        return True

    def _leave(self) -> None:
        with self._lock:
            self.in_flight -= 1
        self._sem.release()

    def intercept_service(self, continuation, handler_call_details):
        handler = continuation(handler_call_details)
        method = handler_call_details.method
        if handler is None or not method.startswith(self.prefixes) or method in self.exempt:
            return handler
        limiter = self
        msg = f"more than {self.limit} requests in flight; retry later"

        if handler.unary_unary is not None:
            inner = handler.unary_unary

            def unary_unary(request, context):
                if not limiter._enter():
                    context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, msg)
                try:
                    return inner(request, context)
                finally:
                    limiter._leave()

            return grpc.unary_unary_rpc_method_handler(unary_unary, handler.request_deserializer,
                                                       handler.response_serializer)
        if handler.stream_stream is not None:
            inner_ss = handler.stream_stream

            def stream_stream(request_iterator, context):
                if not limiter._enter():
                    context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, msg)
                try:
                    yield from inner_ss(request_iterator, context)
                finally:
                    limiter._leave()

            return grpc.stream_stream_rpc_method_handler(stream_stream, handler.request_deserializer,
                                                         handler.response_serializer)
        return handler


def server_options(max_message_bytes: int) -> list[tuple[str, int]]:
    return [
        ("grpc.max_receive_message_length", int(max_message_bytes)),
        ("grpc.max_send_message_length", int(max_message_bytes)),
        ("grpc.so_reuseport", 0),
    ]


def channel_options(max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES) -> list[tuple[str, int]]:
    return [
        ("grpc.max_receive_message_length", int(max_message_bytes)),
        ("grpc.max_send_message_length", int(max_message_bytes)),
    ]


def add_health_and_reflection(server: grpc.Server, service_names: list[str]):
    """Register the standard ``grpc.health.v1.Health`` service (all ``service_names`` and "" SERVING) and server
    reflection; returns the health servicer (call ``enter_graceful_shutdown()`` on it before stopping)."""
    from grpc_health.v1 import health, health_pb2, health_pb2_grpc
    from grpc_reflection.v1alpha import reflection

    hs = health.HealthServicer(experimental_non_blocking=True)
    health_pb2_grpc.add_HealthServicer_to_server(hs, server)
    for name in ["", *service_names]:
        hs.set(name, health_pb2.HealthCheckResponse.SERVING)
    reflection.enable_server_reflection([*service_names, health.SERVICE_NAME, reflection.SERVICE_NAME], server)
    return hs


def bind(server: grpc.Server, address: str) -> str:
    """Bind insecure ``address`` (port 0 = ephemeral); return the address actually bound."""
    address = parse_address(address)
    host = address.rpartition(":")[0]
    port = server.add_insecure_port(address)
    if port == 0:
        raise OSError(f"cannot listen on {address}")
    return f"{host}:{port}"


def wait_for_termination(stoppers: list, grace: float = 5.0) -> int:
    """Block until SIGTERM or SIGINT, then stop every server (``stopper(grace)``); return the signal number."""
    got = threading.Event()
    which = {"sig": 0}

    def handler(signum, frame):
        which["sig"] = signum
        got.set()

    old = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        while not got.wait(0.5):
            pass
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        for stop in stoppers:
            stop(grace)
    return which["sig"]


class Undecodable:
    """What a request that does not parse as its message type becomes (instead of grpc answering INTERNAL): the
    servicer sees it and answers INVALID_ARGUMENT naming the expected message."""

    def __init__(self, message_type: str, error: Exception):
        self.message_type = message_type
        self.error = error

    def refusal(self) -> ServiceError:
        return invalid("request", f"not a valid {self.message_type} message ({type(self.error).__name__})")


def _tolerant(message_class):
    def deserialize(raw: bytes):
        try:
            return message_class.FromString(raw)
        except Exception as exc:  # noqa: BLE001 - protobuf's DecodeError, or anything a broken message raises
            return Undecodable(message_class.DESCRIPTOR.full_name, exc)

    return deserialize


def add_unary_servicer(server: grpc.Server, servicer, service, pb2) -> None:
    """Register the unary-unary methods of ``service`` (a protobuf ServiceDescriptor; message classes from module
    ``pb2``) on ``server``, as the generated ``add_*Servicer_to_server`` does, but with deserializers that never raise:
    an undecodable request reaches the method as :class:`Undecodable`."""
    handlers = {}
    for m in service.methods:
        req, rep = getattr(pb2, m.input_type.name), getattr(pb2, m.output_type.name)
        handlers[m.name] = grpc.unary_unary_rpc_method_handler(getattr(servicer, m.name),
                                                               request_deserializer=_tolerant(req),
                                                               response_serializer=rep.SerializeToString)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service.full_name, handlers),))
    if hasattr(server, "add_registered_method_handlers"):
        server.add_registered_method_handlers(service.full_name, handlers)
