"""A drop-in for CODES' stock ZeroMQ ML server, backed by hybridsim surrogates (docs/design.md §6).

CODES' application surrogate (its *director* LP) streams each rank's iteration times to an external predictor and
asks it for the next iteration times when it skips ahead. This module answers those requests with any hybridsim
surrogate that predicts from a rank's iteration-time history (``surrogate.models.history``: ``ridge`` -- CODES' stock
predictor, ridge regression on the last 4 times --, ``last``, ``mean``, ``ewma``, or a checkpoint of such a model).

Wire protocol (ZeroMQ REQ/REP; CODES connects to ``$ZMQML_ENDPOINT``, default ``tcp://localhost:5555``):

* request = UTF-8 JSON object, one NUL byte, then optional data bytes (whitespace-separated numbers);
* reply = one JSON object whose values are all strings, always with ``status`` (``done``/``failed``) and ``et``
  (seconds spent), and ``error`` when failed. A bad request never stops the server: it gets a ``failed`` reply (a multipart message
  too; a message over :class:`DirectorLimits` ``max_request_bytes`` is dropped by ZeroMQ with its connection).

Files: ``save-model`` / ``load-model`` / ``load-records-csv`` only touch paths inside the folders the operator
allowed (``allowed_dirs``, ``hybridsim serve --allow-dir``); any other path gets one fixed refusal. ``save-model``
never overwrites an existing path (as the gRPC surrogate's ``Save``). Beyond :class:`DirectorLimits`' client and
record limits clients are evicted, least recently used first among those seen in one request only (then among all),
so a flood of client ids never locks others out and cannot evict a client that keeps coming back.

Requests:

* ``{"cmd": "director-request", "surrogate_family": "iteration-time", "surrogate_backend": "...", "operation": OP,
  "args": [...]}`` with OP one of ``send-records`` (client, number of records; data = iteration times in ns),
  ``inference`` (client, steps; data = optional extra context), ``train-model`` (``all``), ``save-model`` /
  ``load-model`` (path), ``load-records-csv`` (path), ``model-status`` (``all`` or a client id) and the aliases
  ``status``, ``train``, ``save``, ``load``, ``load-records``, ``do-inference``. ``args`` may start with their count
  as a string (CODES does: ``["2", "17", "60"]``); the count is dropped when it equals the number of elements after
  it. Other surrogate families (``event-time``, ``packet-latency``) are answered ``failed`` with an explanation.
* the older direct commands of the stock server: ``{"cmd": "send-records" | "iteration-time-inference" |
  "do-inference" | "train-iteration-time-model" | "save-iteration-time-model" | "load-iteration-time-model" |
  "load-iteration-records-csv" | "iteration-time-model-status" | "set-debug", "args": [...]}``;
* ``{"cmd": "nothing"}`` (latency probe) and ``{"cmd": "exit"}`` (reply, then the server stops).

Inference of ``n`` steps is autoregressive: each prediction is appended to the rank's history for the next one.
An inference for a client with no iteration time yet (CODES asks before sending records in optimistic and
inference-only modes, and aborts on any reply but ``done``) is answered ``done`` with a fallback, as CODES' stock
server does: the median of the last 4,096 records received, else 1 ms; the reply says ``fallback`` and
``model-status`` counts them.
Iteration times that are not finite and positive are ignored (as the stock server does); a payload with none usable
is refused. With ``auto_train`` (default for a model created by name, like the stock server) the model is refitted
on all records received so far before an inference when new records have arrived: always if it was never fitted,
then once the records have grown by 2 % since the last fit (so a thousand ranks each flushing a few records before
their inference do not cost a thousand refits).

Why one module of this size: it is one wire protocol -- request parsing, the per-client service state and the server
loop -- that CODES' director client speaks end to end.

Over 600 lines: CODES' director protocol is one conversation (the socket loop, each client's state, the message
checks and the answers), kept in one module so the protocol reads in order.
"""

from __future__ import annotations

import collections
import csv
import json
import math
import sys
import threading
import time
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from .limits import DirectorLimits  # noqa: F401 (re-exported)

DEFAULT_ENDPOINT = "tcp://127.0.0.1:5555"
#: most steps one inference may ask for (the prediction is autoregressive: one model call per step)
MAX_STEPS = 10_000
#: an inference for a client without iteration times, while no client has any, is answered with this (ns)
DEFAULT_FALLBACK_NS = 1_000_000.0
#: iteration times (over all clients) whose median answers an inference for a client without any
RECENT_RECORDS = 4096
#: longest ``error`` text of a reply (errors may quote the request; a reply must not echo megabytes)
MAX_ERROR_CHARS = 500


OPERATIONS = ("send-records", "inference", "train-model", "save-model", "load-model", "load-records-csv",
              "model-status")
ALIASES = {
    "status": "model-status",
    "train": "train-model",
    "save": "save-model",
    "load": "load-model",
    "load-records": "load-records-csv",
    "do-inference": "inference",
    "iteration-time-inference": "inference",
}
#: commands of the stock server that name an operation directly (no ``director-request`` envelope)
LEGACY_COMMANDS = {
    "send-records": "send-records",
    "iteration-time-inference": "inference",
    "do-inference": "inference",
    "train-iteration-time-model": "train-model",
    "save-iteration-time-model": "save-model",
    "load-iteration-time-model": "load-model",
    "load-iteration-records-csv": "load-records-csv",
    "iteration-time-model-status": "model-status",
}
OTHER_FAMILIES = ("event-time", "packet-latency")


class DirectorError(ValueError):
    """A request that cannot be served; its text becomes the reply's ``error``."""


# ------------------------------------------------------------------------------------------------------ parsing
def _reject_constant(name: str):
    raise DirectorError(f"malformed JSON: non-finite number {name} is not allowed")


def split_request(raw: bytes) -> tuple[dict, bytes]:
    """Raw request bytes -> (JSON object, data bytes). Raises :class:`DirectorError`."""
    if not isinstance(raw, (bytes, bytearray)):
        raise DirectorError("request must be bytes")
    head, sep, data = bytes(raw).partition(b"\x00")
    if not sep:
        raise DirectorError("missing NUL separator: a request is a JSON object, one NUL byte (\\x00), then optional "
                            "data bytes")
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DirectorError(f"request JSON is not UTF-8: {exc}") from None
    try:
        msg = json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise DirectorError(f"malformed JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    except RecursionError:
        raise DirectorError("malformed JSON: nested too deeply") from None
    except ValueError as exc:  # e.g. an integer literal longer than Python's digit limit
        raise DirectorError(f"malformed JSON: {str(exc)[:200]}") from None
    if not isinstance(msg, dict):
        raise DirectorError(f"request JSON must be an object, got {type(msg).__name__}")
    return msg, bytes(data)


#: (fewest, most) arguments of each operation, after the leading count is removed
ARITY = {
    "send-records": (2, 2),
    "inference": (2, 2),
    "train-model": (0, 1),
    "save-model": (1, 1),
    "load-model": (1, 1),
    "load-records-csv": (1, 1),
    "model-status": (0, 1),
}


def real_args(args: Any, lo: int = 0, hi: int | None = None) -> list[str]:
    """The request's arguments without CODES' leading count (and without its ``"dummy"`` placeholder).

    The first element is taken as a count, and dropped, when it is an integer equal to the number of elements after
    it (docs/design.md §6) or to the number of elements including itself (what CODES' director actually sends for
    ``send-records`` and ``inference``: ``["3", client, n]``), and what remains fits the operation's ``lo..hi``
    arguments. So ``["2", "17", "60"]`` and ``["3", "17", "60"]`` are both client 17, 60 steps, while a hand-written
    ``["17", "60"]`` is taken as is, and a lone element is always the argument (``["1"]``: client 1)."""
    if args is None:
        return []
    if not isinstance(args, list):
        raise DirectorError(f"'args' must be a list, got {type(args).__name__}")
    out = []
    for i, a in enumerate(args):
        if isinstance(a, (dict, list)) or a is None:
            raise DirectorError(f"args[{i}] must be a string or number, got {json.dumps(a)}")
        out.append(a if isinstance(a, str) else json.dumps(a))
    if out == ["dummy"]:
        return []
    if len(out) > 1:  # a lone element is an argument (model-status "0" is client 0), never a count
        try:
            n = int(out[0])
        except ValueError:
            n = None
        rest = len(out) - 1
        if n is not None and n in (rest, rest + 1) and lo <= rest and (hi is None or rest <= hi):
            return out[1:]
    return out


def _arg(args: list[str], i: int, name: str, op: str) -> str:
    if i >= len(args) or args[i].strip() == "":
        raise DirectorError(f"{op}: missing argument {i + 1} ({name}); got args {args}")
    return args[i].strip()


def _int_arg(args: list[str], i: int, name: str, op: str, lo: int | None = None, hi: int | None = None) -> int:
    s = _arg(args, i, name, op)
    try:
        v = int(s)
    except ValueError:
        try:
            f = float(s)
        except ValueError:
            f = math.nan
        if not math.isfinite(f):
            raise DirectorError(f"{op}: {name} must be a finite integer, got {s!r}") from None
        if f != int(f):
            raise DirectorError(f"{op}: {name} must be an integer, got {s!r}") from None
        v = int(f)
    if lo is not None and v < lo or hi is not None and v > hi:
        rng = f"{lo}..{hi}" if hi is not None else f">= {lo}"
        raise DirectorError(f"{op}: {name} must be {rng}, got {v}")
    return v


def parse_values(data: bytes, what: str) -> tuple[list[float], int]:
    """Whitespace-separated numbers -> (finite positive values, number ignored). Non-numbers are an error."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DirectorError(f"{what}: data is not UTF-8 text: {exc}") from None
    tokens = text.split()
    try:
        arr = np.array(tokens, dtype=np.float64)
    except ValueError:
        for i, tok in enumerate(tokens):
            try:
                float(tok)
            except ValueError:
                raise DirectorError(f"{what}: data value {i + 1} ({tok[:40]!r}) is not a number") from None
        raise DirectorError(f"{what}: data is not whitespace-separated numbers") from None
    ok = np.isfinite(arr) & (arr > 0)
    return arr[ok].tolist(), int(len(arr) - ok.sum())


def _fmt(v: float) -> str:
    return repr(float(v))


# ------------------------------------------------------------------------------------------------------ service
def make_model(spec: str | None = None, **options):
    """``spec``: what :func:`surrogate.load` takes (default ``ridge`` with ``k=4``). Models that need port graphs
    are refused: the director only receives iteration times."""
    import surrogate

    spec = spec or "ridge"
    if spec == "ridge":
        options.setdefault("k", 4)
    model = surrogate.load(spec, options).new()  # SurrogateError: the callers say which option was wrong
    if model.needs_graphs:
        raise DirectorError(f"model {model.name!r} needs port graphs, but CODES' director sends only iteration times; "
                            f"use a history model (ridge, last, mean, ewma) or a checkpoint of one")
    return model


@dataclass
class ClientState:
    records: array = field(default_factory=lambda: array("d"))
    #: requests that used this client (records sent, predictions asked): a client used once is on probation
    uses: int = 0


class FileAccessRefused(DirectorError):
    """A client named a file outside the folders the operator allowed. The text is the same whatever the path and
    whether it exists, so replies reveal nothing about the server's files."""


class IterationTimeService:
    """The state behind the protocol: per-client iteration times, one surrogate, a model version.

    ``allowed_dirs``: the only folders whose files ``save-model`` / ``load-model`` / ``load-records-csv`` may touch
    (none by default: a client can make the server open no file); a relative path is taken inside the first.
    ``limits``: see :class:`DirectorLimits`."""

    def __init__(self, model=None, *, auto_train: bool = True, records_log: str | Path | None = None,
                 workload: str = "codes", allowed_dirs=(), limits: DirectorLimits | None = None,
                 fallback_ns: float | None = None):
        self.model = model if model is not None else make_model("ridge")
        self.auto_train = auto_train
        #: client id -> records, least recently used first (send-records and inference use a client)
        self.clients: collections.OrderedDict[int, ClientState] = collections.OrderedDict()
        self.evicted_clients = 0
        self.version = 0
        self.fitted_clients: set[int] = set()
        self.dirty = False
        self.records_at_fit = 0
        self.n_records = 0
        #: auto-train refits when the records grew by this fraction since the last fit (or it never fitted)
        self.refit_fraction = 0.02
        self.records_log = Path(records_log) if records_log else None
        self.workload = workload
        self.limits = limits or DirectorLimits()
        self.allowed_dirs = [Path(d).resolve() for d in allowed_dirs]
        #: the last iteration times received over all clients: the fallback for a client with none yet
        self.recent: collections.deque = collections.deque(maxlen=RECENT_RECORDS)
        self.fallback_ns = float(DEFAULT_FALLBACK_NS if fallback_ns is None else fallback_ns)
        self.no_history_fallbacks = 0
        #: where notable events (fallback answers) are reported; the server sets it to its log
        self.log: Callable[[str], None] | None = None
        #: client -> every prediction answered, as sent (None: not kept; a hybrid CODES run keeps them to record
        #: the iterations CODES skipped, :data:`codes_bridge.importer.DIRECTOR_ANSWERS`)
        self.answers: dict[int, list[float]] | None = None
        #: client -> group (a CODES rank's job), set by :meth:`set_groups`; None: every client is answered its own
        #: prediction
        self.groups: dict[int, int] | None = None
        self._members: dict[int, list[int]] = {}
        self._group_stamp: collections.Counter = collections.Counter()
        self._group_cache: dict[int, tuple[tuple, list[float]]] = {}

    def set_groups(self, groups: dict[int, int] | None) -> None:
        """Answer every client of a group (the ranks of one job) the group's prediction: at each step the mean of
        the model's predictions for the group's clients that have iteration times, each from its own history (the
        job's iteration time, as the embedded engine's ``controller.sync: skew`` advances every rank of a predicted
        job). ``None``: each client its own prediction (``sync: rank``)."""
        self.groups = dict(groups) if groups is not None else None
        self._members = {}
        for c, g in (self.groups or {}).items():
            self._members.setdefault(g, []).append(c)
        self._group_cache.clear()

    def _answered(self, client: int, text: str) -> str:
        """``text`` (the predictions as sent), kept per client when :attr:`answers` is on."""
        if self.answers is not None:
            self.answers.setdefault(client, []).extend(float(v) for v in text.split())
        return text

    # --------------------------------------------------------------------------------------------- helpers
    def _confined(self, text: str, op: str) -> Path:
        """The file a client named, resolved (symbolic links followed) and checked to lie inside an allowed
        folder; :class:`FileAccessRefused` otherwise, with one message for every refused path."""
        if not self.allowed_dirs:
            raise FileAccessRefused(f"{op}: refused: this server was started without --allow-dir, so it opens no "
                                    f"file a client names")
        try:
            p = Path(text)
            p = (p if p.is_absolute() else self.allowed_dirs[0] / p).resolve()
        except (ValueError, OSError, RuntimeError):
            p = None
        if p is None or not any(p == d or p.is_relative_to(d) for d in self.allowed_dirs):
            raise FileAccessRefused(f"{op}: refused: the path is not inside a folder this server allows "
                                    f"(--allow-dir)")
        return p

    def _touch(self, client: int) -> None:
        """Mark ``client`` as the most recently used, and count the use."""
        st = self.clients.get(client)
        if st is not None:
            self.clients.move_to_end(client)
            st.uses += 1

    def _evict(self, keep: int) -> None:
        """Drop a client other than ``keep`` (its records, its fitted mark): the least recently used of those seen
        in one request only (on probation), else the least recently used of all. A client that came back (a CODES
        rank sends records every iteration and asks for predictions) is evicted only once no one-shot client is
        left, so a flood of new client ids churns among itself and cannot evict an active client's records (a
        segmented LRU, as caches use against scans)."""
        victim = next((c for c, st in self.clients.items() if c != keep and st.uses < 2), None)
        if victim is None:
            victim = next(c for c in self.clients if c != keep)
        st = self.clients.pop(victim)
        if self.groups is not None and victim in self.groups:
            self._group_stamp[self.groups[victim]] += 1
        self.n_records -= len(st.records)
        self.fitted_clients.discard(victim)
        self.evicted_clients += 1
        if self.evicted_clients == 1 and self.log is not None:
            self.log(f"client limit reached (--max-clients {self.limits.max_clients}, --max-total-records "
                     f"{self.limits.max_total_records}): evicting the least recently used clients; model-status "
                     f"counts them")

    def _add(self, client: int, values: list[float], op: str = "send-records") -> None:
        keep = self.limits.max_records_per_client
        st = self.clients.get(client)
        old = len(st.records) if st is not None else 0
        grow = min(old + len(values), keep) - old
        if grow + old > self.limits.max_total_records:
            raise DirectorError(f"{op}: {old + grow} iteration times for client {client} exceed what the server "
                                f"holds over all clients (--max-total-records {self.limits.max_total_records})")
        if st is None:
            if not values:
                return
            while len(self.clients) >= self.limits.max_clients:
                self._evict(client)
            st = self.clients[client] = ClientState()
        self._touch(client)
        while self.n_records + grow > self.limits.max_total_records:
            self._evict(client)
        st.records.extend(values[-keep:])
        if len(st.records) > keep:
            del st.records[:-keep]
        if self.groups is not None and client in self.groups:
            self._group_stamp[self.groups[client]] += 1
        self.recent.extend(values[-RECENT_RECORDS:])
        self.n_records += grow
        if values:
            self.dirty = True

    def _log(self, client: int, values: list[float]) -> None:
        if self.records_log is None or not values:
            return
        new = not self.records_log.exists()
        with open(self.records_log, "a", newline="") as fh:
            w = csv.writer(fh)
            if new:
                w.writerow(["client", "value"])
            for v in values:
                w.writerow([client, _fmt(v)])

    def _fit(self) -> int:
        fit = self.model.fit_series
        if not self.model.fits_series:
            raise DirectorError(f"model {self.model.name!r} cannot be fitted from iteration times by the director "
                                f"(no fit_series); train it offline and serve its checkpoint")
        ids = sorted(c for c, st in self.clients.items() if st.records)
        n = int(fit([np.asarray(self.clients[c].records) for c in ids]))
        if n > 0:
            self.version += 1
            self.fitted_clients = set(ids)
            self.records_at_fit = self.total_records()
        self.dirty = False
        return n

    def total_records(self) -> int:
        return self.n_records

    def _should_refit(self) -> bool:
        if not (self.auto_train and self.dirty and self._trainable()):
            return False
        total = self.total_records()
        return self.records_at_fit == 0 or total - self.records_at_fit >= max(1, self.refit_fraction * total)

    def _trainable(self) -> bool:
        return self.model.fits_series

    # --------------------------------------------------------------------------------------------- operations
    def send_records(self, args: list[str], data: bytes) -> dict:
        op = "send-records"
        client = _int_arg(args, 0, "client", op, lo=0)
        declared = _int_arg(args, 1, "number of records", op, lo=0)
        vals, ignored = parse_values(data, op)
        if not vals and (ignored or declared):
            raise DirectorError(f"{op}: no finite positive iteration time in the data for client {client} "
                                f"({ignored} value(s) ignored)")
        self._add(client, vals)
        self._log(client, vals)
        st = self.clients.get(client)
        return {"client": str(client), "accepted": str(len(vals)), "ignored": str(ignored),
                "total_records": str(len(st.records) if st is not None else 0)}

    def inference(self, args: list[str], data: bytes) -> dict:
        from surrogate.base import Context

        op = "inference"
        client = _int_arg(args, 0, "client", op, lo=0)
        steps = _int_arg(args, 1, "number of steps", op, lo=1, hi=MAX_STEPS)
        context, ignored = parse_values(data, op)
        if ignored and not context:
            raise DirectorError(f"{op}: the context data has no finite positive value ({ignored} ignored)")
        L = max(int(self.model.lookback or 1), 1)
        st = self.clients.get(client)
        self._touch(client)
        n_known = (len(st.records) if st is not None else 0) + len(context)
        if not context and self.groups is not None and client in self.groups:   # the job's answer (set_groups)
            if self._should_refit():
                self._fit()
            preds = self._group_predictions(self.groups[client], steps, L)
            if preds is not None:
                return {"predictions": self._answered(client, " ".join(_fmt(v) for v in preds)),
                        "client": str(client), "steps": str(steps), "model_version": str(self.version)}
        if n_known == 0:
            return self._no_history(client, steps)
        hist = (list(st.records[-L:]) if st is not None else []) + context
        if self._should_refit():
            self._fit()
        window = np.full(L, np.nan)
        tail = np.asarray(hist[-L:], dtype=np.float64)
        window[L - len(tail):] = tail
        preds = []
        fallbacks = 0
        for _ in range(steps):
            ctx = Context(job=f"client-{client}", workload=self.workload, history=window[None, :].copy(),
                          iteration=n_known + len(preds))
            y = float(np.asarray(self.model.predict(ctx), dtype=np.float64).reshape(-1)[0])
            if not (math.isfinite(y) and y > 0):
                last = window[~np.isnan(window)][-1]
                y, fallbacks = float(last), fallbacks + 1
            preds.append(y)
            window = np.roll(window, -1)
            window[-1] = y
        out = {"predictions": self._answered(client, " ".join(_fmt(v) for v in preds)), "client": str(client),
               "steps": str(steps),
               "model_version": str(self.version)}
        if fallbacks:
            out["fallbacks"] = str(fallbacks)
        return out

    def _group_predictions(self, group: int, steps: int, L: int) -> list[float] | None:
        """The group's predictions for the next ``steps`` iterations (:meth:`set_groups`), recomputed only when the
        model or a member's records changed; None when no member has iteration times."""
        from surrogate.base import Context

        key = (self.version, self._group_stamp[group], steps)
        hit = self._group_cache.get(group)
        if hit is not None and hit[0] == key:
            return hit[1]
        members = [c for c in self._members.get(group, ()) if c in self.clients and self.clients[c].records]
        if not members:
            return None
        windows = np.full((len(members), L), np.nan)
        for k, c in enumerate(members):
            tail = np.asarray(self.clients[c].records[-L:], dtype=np.float64)
            windows[k, L - len(tail):] = tail
        last = np.array([w[~np.isnan(w)][-1] for w in windows])
        n_known = min(len(self.clients[c].records) for c in members)
        preds = []
        for _ in range(steps):
            ctx = Context(job=f"group-{group}", workload=self.workload, history=windows.copy(),
                          iteration=n_known + len(preds))
            y = np.asarray(self.model.predict(ctx), dtype=np.float64).reshape(-1)
            y = np.where(np.isfinite(y) & (y > 0), y, last)
            preds.append(float(y.mean()))
            windows = np.roll(windows, -1, axis=1)
            windows[:, -1] = last = y
        self._group_cache[group] = (key, preds)
        return preds

    def _no_history(self, client: int, steps: int) -> dict:
        """An inference for a client with no iteration time yet. CODES asks for one before sending the client's
        records (optimistic mode sends records only from committed events; inference-only mode sends none) and
        aborts on anything but ``done`` with a prediction, so answer as CODES' stock server does: the median of the
        other clients' recent records, else :data:`DEFAULT_FALLBACK_NS`."""
        if self.recent:
            y, how = float(np.median(np.fromiter(self.recent, np.float64))), f"median of {len(self.recent)} recent records"
        else:
            y, how = self.fallback_ns, "default"
        self.no_history_fallbacks += 1
        if self.log is not None:
            self.log(f"inference for client {client} before any of its iteration times: answered {_fmt(y)} ns "
                     f"({how})")
        return {"predictions": self._answered(client, " ".join([_fmt(y)] * steps)), "client": str(client),
                "steps": str(steps),
                "model_version": str(self.version), "fallback": how}

    def train_model(self, args: list[str], data: bytes) -> dict:
        target = args[0].strip() if args else "all"
        if target not in ("", "all", "*"):
            raise DirectorError(f"train-model: the model is shared by all clients; train with target 'all' "
                                f"(got {target!r})")
        total = self.total_records()
        if not self._trainable():
            raise DirectorError(f"train-model: model {self.model.name!r} has nothing to fit from iteration times")
        n = self._fit()
        if n == 0:
            k = self.model.lookback
            raise DirectorError(f"train-model: not enough records to fit (need more than {k} iteration times for at "
                                f"least one client; have {total} over {len(self.clients)} clients)")
        return {"target": "all", "total_clients": str(len(self.clients)),
                "trained_clients": str(len(self.fitted_clients)), "total_records": str(total),
                "training_examples": str(n), "model_version": str(self.version)}

    def save_model(self, args: list[str], data: bytes) -> dict:
        """Write the model to a new checkpoint folder; never over an existing path (as gRPC ``Save``)."""
        name = _arg(args, 0, "output model path", "save-model")
        path = self._confined(name, "save-model")
        exists = DirectorError(f"save-model: {name} already exists; save-model never overwrites, choose another "
                               f"path")
        if path.exists() or path.is_symlink():
            raise exists
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.mkdir()  # exclusive: of two saves to one path, one fails
        except FileExistsError:
            raise exists from None
        except OSError as exc:
            raise DirectorError(f"save-model: cannot write {name}: {exc.strerror or type(exc).__name__}") from None
        try:
            self.model.save(path)
        except OSError as exc:
            raise DirectorError(f"save-model: cannot write {name}: {exc.strerror or type(exc).__name__}") from None
        return {"path": name, "model": self.model.name, "model_version": str(self.version)}

    def load_model(self, args: list[str], data: bytes) -> dict:
        from surrogate.base import SurrogateError

        name = _arg(args, 0, "input model path", "load-model")
        path = self._confined(name, "load-model")
        if not path.exists():
            raise DirectorError(f"load-model: model path does not exist: {name}")
        if not path.is_dir():
            raise DirectorError(f"load-model: {name} is not a checkpoint folder (config.json [+ model.safetensors], "
                                f"as written by save-model)")
        try:
            model = make_model(str(path))
        except (SurrogateError, OSError) as exc:
            raise DirectorError(f"load-model: {name}: not a usable checkpoint ({type(exc).__name__})") from None
        self.model = model
        self.version += 1
        # the loaded model counts as fitted on what is here now; auto-train refits it once enough new records come
        self.dirty = False
        self.records_at_fit = self.total_records()
        return {"path": name, "model": model.name, "model_version": str(self.version)}

    def load_records_csv(self, args: list[str], data: bytes) -> dict:
        op = "load-records-csv"
        name = _arg(args, 0, "CSV path", op)
        path = self._confined(name, op)
        if not path.is_file():
            raise DirectorError(f"{op}: CSV path does not exist: {name}")
        rows: dict[int, list[float]] = {}
        ignored = kept = 0
        room = self.limits.max_total_records  # other clients' records are evicted to make room
        try:
            with open(path, newline="", encoding="utf-8") as fh:
                reader = csv.DictReader(fh)
                cols = set(reader.fieldnames or [])
                if not {"client", "value"} <= cols:
                    raise DirectorError(f"{op}: {name}:1: needs columns client,value")
                for row in reader:
                    line = reader.line_num
                    try:
                        client = int(row["client"])
                        value = float(row["value"])
                    except (TypeError, ValueError):
                        raise DirectorError(f"{op}: {name}:{line}: bad row (client and value must be numbers)"
                                            ) from None
                    if client < 0:
                        raise DirectorError(f"{op}: {name}:{line}: client must be >= 0, got {client}")
                    if math.isfinite(value) and value > 0:
                        if client not in rows and len(rows) >= self.limits.max_clients:
                            raise DirectorError(f"{op}: {name}:{line}: more clients than the server's limit "
                                                f"(--max-clients {self.limits.max_clients})")
                        kept += 1
                        if kept > room:
                            raise DirectorError(f"{op}: {name}:{line}: more iteration times than the server's limit "
                                                f"(max_total_records {self.limits.max_total_records})")
                        rows.setdefault(client, []).append(value)
                    else:
                        ignored += 1
        except (csv.Error, UnicodeDecodeError) as exc:
            raise DirectorError(f"{op}: {name}: not a UTF-8 CSV file ({type(exc).__name__})") from None
        except OSError as exc:
            raise DirectorError(f"{op}: {name}: cannot read ({exc.strerror or type(exc).__name__})") from None
        for c, vals in rows.items():
            self._add(c, vals, op)
        return {"path": name, "loaded_rows": str(sum(map(len, rows.values()))),
                "loaded_clients": str(len(rows)), "ignored": str(ignored)}

    def model_status(self, args: list[str], data: bytes) -> dict:
        target = args[0].strip() if args else "all"
        if target in ("", "all", "*"):
            ids = sorted(self.clients)
        else:
            c = _int_arg([target], 0, "client", "model-status", lo=0)
            ids = [c]
        recs = {c: len(self.clients[c].records) if c in self.clients else 0 for c in ids}
        trained = [c for c in ids if c in self.fitted_clients]
        return {"target": target or "all", "model": self.model.name,
                "model_config": json.dumps(self.model.config(), sort_keys=True),
                "total_clients": str(len(ids)), "total_records": str(sum(recs.values())),
                "trained_clients": str(len(trained)), "model_version": str(self.version),
                "auto_train": "1" if self.auto_train else "0", "fallbacks": str(self.no_history_fallbacks),
                "evicted_clients": str(self.evicted_clients),
                "clients": ";".join(f"{c}:records={recs[c]},trained={int(c in self.fitted_clients)}" for c in ids)}

    def dispatch(self, op: str, args: list[str], data: bytes) -> dict:
        from surrogate.base import SurrogateError

        fn = {
            "send-records": self.send_records,
            "inference": self.inference,
            "train-model": self.train_model,
            "save-model": self.save_model,
            "load-model": self.load_model,
            "load-records-csv": self.load_records_csv,
            "model-status": self.model_status,
        }[op]
        try:
            return fn(args, data)
        except SurrogateError as exc:
            raise DirectorError(f"{op}: {exc}") from None


# ------------------------------------------------------------------------------------------------------ protocol
def _reply(status: str, t0: float, **extra) -> dict:
    out = {"status": status, "et": repr(time.perf_counter() - t0)}
    out.update({k: str(v) for k, v in extra.items()})
    if len(out.get("error", "")) > MAX_ERROR_CHARS:
        out["error"] = out["error"][:MAX_ERROR_CHARS] + "... (cut)"
    return out


def handle_request(service: IterationTimeService, raw: bytes) -> tuple[dict, bool]:
    """One request -> (reply, stop?). Never raises: every problem becomes a ``failed`` reply with ``error``."""
    t0 = time.perf_counter()
    try:
        msg, data = split_request(raw)
        cmd = msg.get("cmd")
        if not isinstance(cmd, str) or not cmd:
            raise DirectorError("request has no 'cmd' string (expected director-request, nothing, exit or a stock "
                                "server command)")
        if cmd == "nothing":
            return _reply("done", t0), False
        if cmd == "exit":
            return _reply("done", t0, message="server stopping"), True
        if cmd == "set-debug":
            return _reply("done", t0), False
        if cmd == "director-request":
            family = msg.get("surrogate_family", "iteration-time")
            if family in OTHER_FAMILIES:
                raise DirectorError(f"surrogate_family {family!r} (packet-level models inside the network) is not "
                                    f"served by hybridsim's director, which predicts iteration times; use CODES' own "
                                    f"server for it or surrogate_family 'iteration-time'")
            if family != "iteration-time":
                raise DirectorError(f"unknown surrogate_family {family!r}; this server answers 'iteration-time'")
            op = msg.get("operation")
            if not isinstance(op, str) or not op:
                raise DirectorError("director-request has no 'operation' string")
        elif cmd in LEGACY_COMMANDS:
            op = LEGACY_COMMANDS[cmd]
        else:
            raise DirectorError(f"unknown cmd {cmd!r}; known: director-request, nothing, exit, set-debug, "
                                f"{', '.join(LEGACY_COMMANDS)}")
        op = ALIASES.get(op, op)
        if op not in OPERATIONS:
            raise DirectorError(f"unknown operation {msg.get('operation', cmd)!r}; known: {', '.join(OPERATIONS)} "
                                f"(aliases: {', '.join(ALIASES)})")
        lo, hi = ARITY[op]
        args = real_args(msg.get("args"), lo, hi)
        if len(args) > hi:
            raise DirectorError(f"{op}: too many arguments {args} (expects at most {hi}, optionally preceded by "
                                f"their count)")
        extra = service.dispatch(op, args, data)
        return _reply("done", t0, operation=op, **extra), False
    except DirectorError as exc:
        return _reply("failed", t0, error=str(exc)), False
    except Exception as exc:  # a bug or an unexpected model failure must not stop the server
        return _reply("failed", t0, error=f"internal error: {type(exc).__name__}: {exc}"), False


def handle_frames(service: IterationTimeService, frames: list[bytes]) -> tuple[dict, bool]:
    """A received ZeroMQ message (its frames) -> (reply, stop?). A request is exactly one frame."""
    if len(frames) != 1:
        return _reply("failed", time.perf_counter(),
                      error=f"a request is one ZeroMQ frame (JSON, NUL, data); got a multipart message of "
                            f"{len(frames)} frames"), False
    return handle_request(service, frames[0])


class CodesDirectorServer:
    """ZeroMQ REP server speaking CODES' director protocol. ``endpoint`` may use port ``*`` (ephemeral): the bound
    address is :attr:`endpoint` after :meth:`bind`. Serve with :meth:`serve_forever` (blocking; stops on ``exit``
    or :meth:`stop`)."""

    def __init__(self, service: IterationTimeService, endpoint: str = DEFAULT_ENDPOINT,
                 log: Callable[[str], None] | None = None):
        self.service = service
        self.max_request_bytes = service.limits.max_request_bytes
        if service.log is None:
            service.log = log
        self.requested = endpoint
        self.endpoint: str | None = None
        self.log = log
        self.requests = 0
        self._stop = threading.Event()
        self._ctx = None
        self._sock = None

    def bind(self) -> str:
        import zmq

        self._ctx = zmq.Context()
        self._sock = self._ctx.socket(zmq.REP)
        self._sock.setsockopt(zmq.LINGER, 0)
        # larger messages never reach Python: ZeroMQ closes the sender's connection (no reply, no memory spent)
        self._sock.setsockopt(zmq.MAXMSGSIZE, int(self.max_request_bytes))
        try:
            self._sock.bind(self.requested)
        except zmq.ZMQError as exc:
            self.close()
            raise OSError(f"cannot bind the CODES director endpoint {self.requested}: {exc}") from None
        self.endpoint = self._sock.getsockopt_string(zmq.LAST_ENDPOINT)
        return self.endpoint

    def stop(self) -> None:
        self._stop.set()

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close(0)
            self._sock = None
        if self._ctx is not None:
            self._ctx.term()
            self._ctx = None

    def serve_forever(self, poll_ms: int = 100) -> int:
        """Serve until ``exit`` or :meth:`stop`; returns the number of requests answered."""
        import zmq

        if self._sock is None:
            self.bind()
        try:
            while not self._stop.is_set():
                if not self._sock.poll(poll_ms, zmq.POLLIN):
                    continue
                frames = self._sock.recv_multipart()
                reply, stop = handle_frames(self.service, frames)
                self.requests += 1
                self._sock.send(json.dumps(reply).encode("utf-8"))
                if self.log is not None and reply.get("status") != "done":
                    self.log(f"request {self.requests}: failed: {reply.get('error')}")
                if stop:
                    break
        finally:
            self.close()
        return self.requests


def serve(endpoint: str = DEFAULT_ENDPOINT, model: str | None = None, *, model_options: dict | None = None,
          auto_train: bool | None = None, records_log: str | None = None, allowed_dirs=(),
          limits: DirectorLimits | None = None, out=sys.stderr) -> int:
    """Run the director until ``exit`` (or Ctrl-C). Used by ``hybridsim serve --codes-director``."""
    for d in allowed_dirs:
        if not Path(d).is_dir():
            raise DirectorError(f"--allow-dir {d}: not a directory")
    m = make_model(model, **(model_options or {}))
    if auto_train is None:
        from surrogate.loading import is_checkpoint_spec

        auto_train = not (model and is_checkpoint_spec(model))
    service = IterationTimeService(m, auto_train=auto_train, records_log=records_log, allowed_dirs=allowed_dirs,
                                   limits=limits)
    server = CodesDirectorServer(service, endpoint, log=lambda s: print(f"codes-director: {s}", file=out, flush=True))
    bound = server.bind()
    cfg = json.dumps(m.config(), sort_keys=True)
    files = ", ".join(str(d) for d in service.allowed_dirs) or "none (no --allow-dir)"
    print(f"codes-director: serving model {m.name!r} {cfg} on {bound} (auto-train {'on' if auto_train else 'off'}; "
          f"client-named files allowed in: {files}); "
          f"point CODES at it with ZMQML_ENDPOINT={bound.replace('0.0.0.0', 'localhost')}", file=out, flush=True)
    try:
        n = server.serve_forever()
    except KeyboardInterrupt:
        server.close()
        print("codes-director: interrupted", file=out, flush=True)
        return 130
    print(f"codes-director: stopped after {n} requests", file=out, flush=True)
    return 0
