"""The one model interface every surrogate implements, and the context it predicts from.

A surrogate predicts the next iteration time of every active rank of one job. What it may look at is a
:class:`Context`: each rank's recent iteration times (truth or earlier predictions, oldest first) and, for graph
models, the last ``Lg`` per-iteration port graphs of the job. Models never see how records were produced.

Shapes (R ranks of the job, L history length, Lg graph look-back, P router ports, F node features):
    history   float64 (R, L)    iteration times in ns, oldest first; NaN where a rank has fewer than L values
    graphs    float32 (Lg, P, F) node features of the last Lg iterations (None for history-only models)
    mask      bool    (P,)      ports with a rank of this job attached
    rank_port int64   (R,)      port id of each rank
"""

from __future__ import annotations

import abc
import json
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np


class SurrogateError(ValueError):
    """Bad input to a surrogate (wrong topology, corrupt checkpoint, NaN features, ...)."""


@dataclass
class Context:
    job: str
    workload: str
    history: np.ndarray
    graphs: np.ndarray | None = None
    mask: np.ndarray | None = None
    rank_port: np.ndarray | None = None
    iteration: int | None = None


def check_kwargs(cls, config: dict) -> None:
    """:class:`SurrogateError` naming the first key of ``config`` that ``cls``'s constructor does not take."""
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

    def config(self) -> dict:
        return {}

    @classmethod
    def check_config(cls, config: dict) -> None:
        """Raise :class:`SurrogateError` if ``cls(**config)`` would fail, before a run starts. The default builds one:
        the built-in constructors are cheap (no data, no fitting); a model whose constructor reaches outside the
        process (a service) overrides this with :func:`check_kwargs` and its own argument checks."""
        check_kwargs(cls, config)
        try:
            cls(**config)
        except SurrogateError:
            raise
        except Exception as exc:
            raise SurrogateError(f"{cls.name}: bad config {config}: {type(exc).__name__}: {exc}") from None

    def fit(self, dataset, train_idx, val_idx=None, **kw) -> dict:  # history models: nothing to fit
        return {}

    @abc.abstractmethod
    def predict(self, ctx: Context) -> np.ndarray:
        """Next iteration time (ns, float64, shape (R,)) for every rank of ``ctx``."""

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


def load_surrogate(path: str | Path) -> Surrogate:
    """Load a checkpoint folder written by :meth:`Surrogate.save`."""
    from .registry import create

    path = Path(path)
    cfg_path = path / "config.json"
    if not cfg_path.is_file():
        raise SurrogateError(f"{path}: not a surrogate checkpoint (no config.json)")
    try:
        cfg = json.loads(cfg_path.read_text())
        name, config = cfg["model"], cfg.get("config", {})
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise SurrogateError(f"{cfg_path}: corrupt checkpoint config: {exc}") from None
    model = create(name, **config)
    st = path / "model.safetensors"
    if st.exists():
        from safetensors.torch import load_file

        try:
            state = load_file(str(st))
        except Exception as exc:  # safetensors raises its own error types
            raise SurrogateError(f"{st}: corrupt weights: {exc}") from None
        model._load_state(state)
    return model


def last_valid(history: np.ndarray) -> np.ndarray:
    """Last non-NaN value per row of ``history`` (R, L); NaN if a row has none."""
    h = np.asarray(history, dtype=np.float64)
    ok = ~np.isnan(h)
    idx = np.where(ok.any(axis=1), h.shape[1] - 1 - np.argmax(ok[:, ::-1], axis=1), 0)
    out = h[np.arange(h.shape[0]), idx]
    out[~ok.any(axis=1)] = np.nan
    return out
