"""The one model interface every surrogate implements, and the context it predicts from.

A surrogate predicts the next iteration time of every active rank of one job. What it may look at is a
:class:`Context`: each rank's recent iteration times (truth or earlier predictions, oldest first) and, for graph
models, the last ``Lg`` per-iteration port graphs of the job. Models never see how records were produced.

Shapes (R ranks of the job, L history length, Lg graph look-back, P router ports, F node features):
    history   float64 (R, L)    iteration times in ns, oldest first; NaN where a rank has fewer than L values
    graphs    float32 (Lg, P, F) node features of the last Lg iterations (None for history-only models)
    mask      bool    (P,)      ports with a rank of this job attached
    rank_port int64   (R,)      port id of each rank
    columns   int64   (L,)      iteration index of each history column (-1 where padded; None: consecutive, ending
                                at ``iteration``)
    load      float64 (L,)      co-runner load (:meth:`JobInfo.load`) when each history column's iteration started
    load_now  float             co-runner load now, at the start of the iteration being predicted
    flow      float64 (L,)      the flow-level model's iteration time of this job (ns) beside the co-runners running
                                when each history column's iteration started (NaN: unknown; only for models with
                                ``needs_flow``, else None)
    flow_now  float             the same beside the co-runners running now (None: unknown): the prediction before
                                any truth, at a job's start (hybridsim.flow.FlowModel.iteration_time)
    ranks     int64   (R,)      job-local rank of each history row (None: 0 .. R-1)

Models that transfer between scenarios (the pretrained surrogate) also read ``info``, a :class:`JobInfo`: what the job
is, fixed when it starts and known before anything of it is simulated.
"""

from __future__ import annotations

import abc
import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np


class SurrogateError(ValueError):
    """Bad input to a surrogate (wrong topology, corrupt checkpoint, NaN features, ...)."""


class UnknownModelError(SurrogateError):
    """No registered model has this name."""


class OptionBoundError(SurrogateError):
    """A numeric model option over its declared bound (:attr:`Surrogate.bounds`); ``key`` names the option."""

    def __init__(self, message: str, key: str):
        super().__init__(message)
        self.key = key


#: the bounds models declare (:attr:`Surrogate.bounds`): generous for any model this project trains, small enough
#: that one option alone cannot ask for more than a few GiB, nor a training loop for more than 10^5 passes
MAX_LOOKBACK = 4096        # iterations of history (k, lookback, graph_lookback); the gRPC service uses it too
MAX_WIDTH = 4096           # hidden sizes, feature counts, attention widths
MAX_LAYERS = 64            # stacked layers, diffusion steps, attention heads
MAX_EPOCHS = 100_000       # training epochs, early-stopping patience, online tuning passes
MAX_BATCH = 65_536         # mini-batch sizes


#: workload kinds a :class:`JobInfo` one-hot encodes (anything else is "other")
KNOWN_WORKLOADS = ("milc", "lammps", "nearest_neighbor", "allreduce")


@dataclass(frozen=True)
class JobInfo:
    """Descriptors of one job that carry over between scenarios (a pretrained model's job inputs).

    Attributes:
        workload:           workload kind
        ranks, iterations:  the job's size
        bytes_per_iteration: mean bytes one rank sends per iteration (from the workload definition; 0 unknown)
        groups:             dragonfly groups the job's terminals span
        machine_groups, machine_terminals: the system's size
    """

    workload: str
    ranks: int
    iterations: int
    bytes_per_iteration: float
    groups: int
    machine_groups: int
    machine_terminals: int

    @classmethod
    def of(cls, workload: str, ranks: int, iterations: int, volumes, terminals, shape) -> "JobInfo":
        """From what a run description holds: ``volumes`` bytes per iteration (or None), ``terminals`` each rank's
        terminal id (or None: the job spans all groups), ``shape`` the topology (groups, routers_per_group,
        terminals_per_router attributes)."""
        n_groups = int(shape.groups)
        v = np.asarray(volumes if volumes is not None else [], dtype=np.float64)
        info = cls(str(workload), int(ranks), int(iterations), float(v.mean()) if v.size else 0.0, n_groups, n_groups,
                   n_groups * int(shape.routers_per_group) * int(shape.terminals_per_router))
        return info if terminals is None else info.placed(terminals)

    def placed(self, terminals) -> "JobInfo":
        """This job on ``terminals`` (a stream job's, known when it starts): ``groups`` from them."""
        import dataclasses

        per_group = max(self.machine_terminals // max(self.machine_groups, 1), 1)
        groups = len(np.unique(np.asarray(terminals, np.int64) // per_group))
        return dataclasses.replace(self, groups=int(groups))

    def load(self, other_ranks: int) -> float:
        """Co-runner load: ranks of the other jobs running (background included) over the machine's terminals."""
        return float(other_ranks) / max(self.machine_terminals, 1)


@dataclass
class Context:
    job: str
    workload: str
    history: np.ndarray
    graphs: np.ndarray | None = None
    mask: np.ndarray | None = None
    rank_port: np.ndarray | None = None
    iteration: int | None = None
    columns: np.ndarray | None = None
    info: JobInfo | None = None
    load: np.ndarray | None = None
    load_now: float | None = None
    ranks: np.ndarray | None = None
    flow: np.ndarray | None = None
    flow_now: float | None = None


def check_bounds(cls, config: dict) -> None:
    """:class:`OptionBoundError` naming the first option of ``config`` over its bound in ``cls.bounds`` (NaN and
    integers too large for a float included); nothing is built. What is not a number (``None``, the option's "unset",
    or a string the constructor refuses) is left to the constructor."""
    for key, hi in getattr(cls, "bounds", {}).items():
        v = config.get(key)
        if v is None or isinstance(v, bool):
            continue
        try:
            x = float(v)
        except OverflowError:  # an int beyond float range
            x = float("inf")
        except (TypeError, ValueError):
            continue
        if not x <= hi:
            shown = repr(v) if len(repr(v)) <= 40 else f"{repr(v)[:37]}..."
            raise OptionBoundError(f"{cls.name}: option {key}={shown} must be a number at most {hi} (its bound)", key)


def check_kwargs(cls, config: dict) -> None:
    """:class:`SurrogateError` naming the first key of ``config`` that ``cls``'s constructor does not take, or the
    first option over its declared bound (:func:`check_bounds`)."""
    import inspect

    params = inspect.signature(cls).parameters
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return
    for key in config:
        if key not in params or params[key].kind not in (inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                                         inspect.Parameter.KEYWORD_ONLY):
            raise SurrogateError(f"{cls.name}: unknown config key {key!r} (it takes: {', '.join(params) or 'none'})")
    missing = [n for n, p in params.items() if p.default is p.empty and p.kind is not p.VAR_POSITIONAL
               and n not in config]
    if missing:
        raise SurrogateError(f"{cls.name}: config needs {', '.join(missing)}")
    check_bounds(cls, config)


class SeriesView:
    """The one series contract a model's ``fit``/``tune`` read: offline datasets (:class:`surrogate.dataset.JobSeries`),
    the hybrid loop's online feeds (:class:`surrogate.online.OnlineSeries`) and the gRPC service's ``JobDataset``.

    Fields (R ranks, T iterations, P ports, F features): ``job``, ``workload``, ``y`` float64 (R, T) iteration times
    (NaN where unknown), ``x`` (T, P, F) node-feature graphs (an array or a lazy array-like indexed like one; row t
    belongs to column t of ``y``) or None, ``mask`` (P,), ``rank_port`` (R,), ``shape`` the topology
    :class:`~hybridsim_common.topology.DragonflyShape` (None: the series does not say; a graph model must already be built
    for one). Every implementation has all of these fields. The target indices given with a series are columns of
    ``y``. Optional (class defaults None): ``info`` the job's :class:`JobInfo`, ``load`` float64 (T,) the co-runner
    load when each iteration started."""

    info: "JobInfo | None" = None
    load: np.ndarray | None = None

    @property
    def T(self) -> int:
        return self.y.shape[1]

    @property
    def R(self) -> int:
        return self.y.shape[0]

    @property
    def n_ports(self) -> int:
        return self.x.shape[1]

    @property
    def n_features(self) -> int:
        return self.x.shape[2]

    def context(self, t: int, lookback: int, graph_lookback: int = 0) -> Context:
        """What a model may use to predict iteration ``t + 1``: ``history = y[:, t-L+1 .. t]`` (NaN-padded on the
        left when ``t - L + 1 < 0``) and ``graphs = x[t-Lg+1 .. t]`` (the first graph repeated on the left when
        needed; ``None`` for ``graph_lookback == 0`` or a series without graphs)."""
        t = int(t)
        if not -1 <= t < self.T:
            raise IndexError(f"context: t={t} outside -1..{self.T - 1}")
        L = int(lookback)
        hist = np.full((self.R, L), np.nan)
        lo = max(0, t - L + 1)
        if t >= 0 and L > 0:
            hist[:, L - (t - lo + 1):] = self.y[:, lo:t + 1]
        graphs = None
        if graph_lookback > 0 and self.x is not None:
            idx = np.clip(np.arange(t - graph_lookback + 1, t + 1), 0, self.T - 1)
            graphs = self.x[idx]
        return Context(job=self.job, workload=self.workload, history=hist, graphs=graphs, mask=self.mask,
                       rank_port=self.rank_port, iteration=t)


class TailGraphs:
    """A series' ``x`` when only the graphs of its last ``Tg`` columns are held: a read-only ``(T, P, F)`` array-like
    indexed by column of ``y`` (``x[t]`` is column t's graph), NaN for the columns before ``offset = T - Tg``."""

    def __init__(self, held: np.ndarray, T: int):
        self.held = np.asarray(held, dtype=np.float32)
        self.offset = int(T) - self.held.shape[0]
        if self.offset < 0:
            raise ValueError(f"TailGraphs: {self.held.shape[0]} graphs for {T} columns")
        self.shape = (int(T),) + self.held.shape[1:]
        self.ndim, self.dtype = 3, self.held.dtype

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, idx) -> np.ndarray:
        T = self.shape[0]
        a = np.arange(T)[idx] if isinstance(idx, slice) else np.asarray(idx, dtype=np.int64)
        flat = a.ravel()
        if flat.size and (flat.min() < -T or flat.max() >= T):
            raise IndexError(f"graph index outside 0..{T - 1}")
        flat = np.where(flat < 0, flat + T, flat)
        out = np.full((flat.size,) + self.shape[1:], np.nan, np.float32)
        ok = flat >= self.offset
        out[ok] = self.held[flat[ok] - self.offset]
        return out.reshape(a.shape + self.shape[1:])

    def __array__(self, dtype=None, copy=None):
        out = self[np.arange(self.shape[0])]
        return out if dtype is None else out.astype(dtype)


class Surrogate(abc.ABC):
    """Base class. Subclasses set ``name`` and implement ``predict``; learned ones also ``fit``/``tune`` and the
    ``_state``/``_load_state`` pair used by :meth:`save` / :meth:`load` (config JSON + safetensors)."""

    name: ClassVar[str] = "base"
    #: how many past iteration times ``predict`` wants per rank
    lookback: int = 1
    #: whether ``predict`` needs ``Context.graphs``
    needs_graphs: ClassVar[bool] = False
    #: how many past graphs ``predict`` wants (``Context.graphs`` has this many; 0 for history-only models)
    graph_lookback: int = 0
    #: whether ``predict`` reads ``Context.flow``/``flow_now``: the hybrid run then builds the flow-level interference
    #: model of its jobs (``hybridsim.flow``: per-phase traffic and compute, routes, protocol latency, max-min shares)
    #: and records, for every iteration, the job's modelled time beside the co-runners running when it starts
    needs_flow: ClassVar[bool] = False
    #: whether :meth:`fit` costs next to nothing (history models: closed form or no parameters): the hybrid loop then
    #: fits it on each warm-up iteration's history and scores its prediction of the iteration (the evidence a policy
    #: ends a job's warm-up on, ``JobView.clean_signed_errors``); other models are scored on their warm-up once, at
    #: their first fit
    cheap_fit: ClassVar[bool] = False
    #: whether :meth:`predict`'s answer is a function of ``ctx.history`` alone (not of the iteration, the load or
    #: anything else of the context) until the next fit or tune, and :meth:`predict_many` that answer repeated: the
    #: hybrid loop then reuses an answer for the same history (a predicted stretch, its shadow in the next window)
    history_only: ClassVar[bool] = False

    def change_error(self, workload: str) -> float | None:
        """Its own expected error (%) at a co-runner change of a job of ``workload`` kind: the error within which
        68 % of its first predictions after a change fell, before any truth of the new mix (``JobView.change_error``,
        which a policy may take for a window at the change); None (the default): it declares none."""
        return None
    #: whether :meth:`fit_series` fits the model from bare iteration-time series (CODES' director uses it)
    fits_series: ClassVar[bool] = False
    #: upper bounds of the numeric constructor options that size an allocation or a loop, option -> largest value
    #: (e.g. ``{"hidden": MAX_WIDTH, "epochs": MAX_EPOCHS}``): checked by :func:`check_kwargs` and
    #: :func:`surrogate.registry.create`, before anything is built
    bounds: ClassVar[dict[str, float]] = {}

    def config(self) -> dict:
        return {}

    @classmethod
    def check_config(cls, config: dict) -> None:
        """Raise :class:`SurrogateError` if ``cls(**config)`` would fail, before a run starts. The default builds one:
        the built-in constructors are cheap (no data, no fitting) once :func:`check_kwargs` has checked the options'
        bounds; a model whose constructor reaches outside the process (a service) overrides this with
        :func:`check_kwargs` and its own argument checks."""
        check_kwargs(cls, config)
        try:
            cls(**config)
        except SurrogateError:
            raise
        except Exception as exc:
            raise SurrogateError(f"{cls.name}: bad config {config}: {type(exc).__name__}: {exc}") from None

    def fit(self, dataset, train_idx, val_idx=None, **kw) -> dict:  # history models: nothing to fit
        """Fit on the target columns ``train_idx`` of a :class:`SeriesView` (``val_idx``: validation targets)."""
        return {}

    def fit_series(self, series: list[np.ndarray]) -> int:
        """Fit on a list of 1-D iteration-time series (one per rank or client); returns the number of training
        examples. Only models with ``fits_series`` implement it."""
        raise SurrogateError(f"{self.name}: cannot be fitted from bare iteration-time series")

    def check_run(self, scenario: dict) -> None:
        """Called once before a hybrid run with its resolved scenario (``hybridsim.scenario.scenario_to_dict``): a
        model tied to one run (the oracle, which answers with a pure run's times) raises :class:`SurrogateError`
        for another. Default: any run."""

    def can_fit(self, series: SeriesView, train_idx) -> bool:
        """Whether :meth:`fit` on these targets has anything to learn from; the hybrid loop defers a fit until it
        has (predicting each rank's last truth meanwhile). Default: always."""
        return True

    @abc.abstractmethod
    def predict(self, ctx: Context) -> np.ndarray:
        """Next iteration time (ns, float64, shape (R,)) for every rank of ``ctx``."""

    def predict_many(self, ctx: Context, k: int) -> np.ndarray:
        """The next ``k`` iteration times of every rank, float64 (k, R), when nothing is learnt in between and each
        iteration's context is ``ctx`` one iteration on: row m is :meth:`predict` of ``ctx`` with ``iteration``
        advanced by m (a history feed on truth gives exactly these contexts over a predicted stretch, as no truth
        arrives in it; the hybrid controller's fast-forward asks for a stretch in one call). It must equal those k
        one-step predictions, value for value: the default makes them; a model that does not read
        ``ctx.iteration`` may compute one row and repeat it."""
        if k <= 0:
            return np.zeros((0, len(ctx.history)))
        base = ctx.iteration if ctx.iteration is not None else -1
        rows = [np.asarray(self.predict(dataclasses.replace(ctx, iteration=base + m)), dtype=np.float64).reshape(-1)
                for m in range(k)]
        return np.vstack(rows)

    def tune(self, dataset, window_idx, **kw) -> dict:
        """Online update on a window of new ground truth (default: nothing to tune)."""
        return {}

    # ------------------------------------------------------------------------------------------- checkpoints
    def save(self, path: str | Path) -> None:
        from safetensors.torch import save_file

        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        cfg = {"model": self.name, "config": self.config()}
        (path / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
        state = self._state()
        if state:
            save_file({k: v.contiguous() for k, v in state.items()}, str(path / "model.safetensors"))

    def _state(self) -> dict:
        return {}

    def _load_state(self, state: dict) -> None:
        pass


def last_valid(history: np.ndarray) -> np.ndarray:
    """Last non-NaN value per row of ``history`` (R, L); NaN if a row has none."""
    h = np.asarray(history, dtype=np.float64)
    if h.ndim == 2 and h.shape[1]:
        # once per prediction: most rows end in a value, and only the others are searched
        out = h[:, -1].copy()
        miss = np.flatnonzero(np.isnan(out))
        if len(miss):
            out[miss] = _last_valid(h[miss])
        return out
    return _last_valid(h)


def _last_valid(h: np.ndarray) -> np.ndarray:
    """:func:`last_valid` by search over every row."""
    ok = ~np.isnan(h)
    idx = np.where(ok.any(axis=1), h.shape[1] - 1 - np.argmax(ok[:, ::-1], axis=1), 0)
    out = h[np.arange(h.shape[0]), idx]
    out[~ok.any(axis=1)] = np.nan
    return out
