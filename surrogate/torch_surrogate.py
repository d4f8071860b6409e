"""The base of the surrogates whose learned state is one torch module (lstm, dcrnn, smart, smart-nollm, pretrained).

PyG's ``BasicGNN`` pattern: what every torch model does with its network is written here once, and a model is its
network, its inputs and its loss on top.

* Training (:func:`fit_loop`): Adam over mini-batches of targets with early stopping on a validation split.
* Online tuning (:meth:`TorchSurrogate.tune`): ``epochs`` passes of Adam over the usable targets of the new window, all
  of them in one batch, gradient norm clipped at 1 (:func:`fit_loop` without early stopping). A model
  gives :meth:`~TorchSurrogate._tune_targets` (the window's targets it can learn from; it may check the series first),
  :meth:`~TorchSurrogate._tune_loss` and :meth:`~TorchSurrogate._tune_plan`.
* Checkpoint state (:meth:`~TorchSurrogate._state` / :meth:`~TorchSurrogate._load_state`, the pair
  :meth:`Surrogate.save <surrogate.base.Surrogate.save>` and :func:`surrogate.loading.load_surrogate` use): the
  network's ``state_dict``, keys and tensors as the module names them (so a checkpoint is byte for byte what it was
  before this base existed).
* Copies (:meth:`~TorchSurrogate.__deepcopy__`): attributes named in :attr:`~TorchSurrogate.shared` (a frozen language
  model, a read-only sparse operator) are shared between a model and its copies, everything else is copied.
"""

from __future__ import annotations

import copy
import math
import time
from typing import Callable, ClassVar

import numpy as np
import torch

from .base import MAX_BATCH, MAX_EPOCHS, MAX_LAYERS, MAX_LOOKBACK, MAX_WIDTH, Surrogate, SurrogateError


def fit_loop(module: torch.nn.Module, loss_fn: Callable[[np.ndarray], torch.Tensor], train_items: np.ndarray,
             val_items: np.ndarray | None = None, *, epochs: int = 100, lr: float = 3e-3, batch_size: int = 32,
             patience: int = 15, seed: int = 0, progress: bool = False, desc: str = "train",
             weight_decay: float = 0.0, early_stopping: bool = True, clip: float = 1.0, shuffle: bool = True) -> dict:
    """Adam over mini-batches of ``train_items`` (e.g. target iterations; shuffled each epoch unless not
    ``shuffle``); ``loss_fn(items)`` returns the mean loss of a batch. After each epoch the loss on ``val_items`` (or
    on the train items when there are none) is measured; training stops after ``patience`` epochs without improvement
    and the best weights are restored.
    Shows a tqdm bar when ``progress``. Returns ``{"epochs", "best_epoch", "best_val", "train_loss", "seconds"}``."""
    from tqdm import tqdm

    train_items = np.asarray(train_items)
    if train_items.size == 0:
        raise SurrogateError("nothing to train on (empty training window)")
    rng = np.random.default_rng(seed)
    params = [p for p in module.parameters() if p.requires_grad]
    opt = torch.optim.Adam(params, lr=lr, weight_decay=weight_decay)
    eval_items = val_items if val_items is not None and len(val_items) else None
    best, best_state, best_epoch, bad = math.inf, None, -1, 0
    hist = []
    t0 = time.perf_counter()
    bar = tqdm(range(epochs), desc=desc, disable=not progress, leave=False, dynamic_ncols=True)
    ep = -1
    for ep in bar:
        module.train()
        perm = rng.permutation(len(train_items)) if shuffle else np.arange(len(train_items))
        tot, n = 0.0, 0
        for a in range(0, len(perm), batch_size):
            items = train_items[perm[a:a + batch_size]]
            opt.zero_grad()
            loss = loss_fn(items)
            if not torch.isfinite(loss):
                raise SurrogateError(f"{desc}: loss became non-finite at epoch {ep}")
            loss.backward()
            if clip:
                torch.nn.utils.clip_grad_norm_(params, clip)
            opt.step()
            tot += float(loss.detach()) * len(items)
            n += len(items)
        train_loss = tot / max(n, 1)
        hist.append(train_loss)
        if not early_stopping:
            bar.set_postfix(loss=f"{train_loss:.4g}")
            continue
        v = evaluate_loss(module, loss_fn, eval_items if eval_items is not None else train_items, batch_size)
        if v < best - 1e-7:
            best, best_epoch, bad = v, ep, 0
            best_state = copy.deepcopy(module.state_dict())
        else:
            bad += 1
        bar.set_postfix(loss=f"{train_loss:.4g}", val=f"{v:.4g}", best=f"{best:.4g}")
        if bad >= patience:
            break
    bar.close()
    if best_state is not None:
        module.load_state_dict(best_state)
    module.eval()
    return {"epochs": ep + 1, "best_epoch": best_epoch, "best_val": best if best < math.inf else None,
            "train_loss": hist[-1] if hist else None, "seconds": time.perf_counter() - t0}


def evaluate_loss(module: torch.nn.Module, loss_fn, items: np.ndarray, batch_size: int = 64) -> float:
    module.eval()
    tot, n = 0.0, 0
    with torch.no_grad():
        for a in range(0, len(items), batch_size):
            it = items[a:a + batch_size]
            tot += float(loss_fn(it)) * len(it)
            n += len(it)
    return tot / max(n, 1)


class TorchSurrogate(Surrogate):
    """A surrogate whose learned state is ``self.net``, a ``torch.nn.Module`` (None until the model knows the shapes
    it is built for). See the module docstring for what a subclass provides."""

    net = None
    #: the options most torch models share (each model adds its own, ``{**TorchSurrogate.bounds, ...}``)
    bounds: ClassVar[dict[str, float]] = {
        "k": MAX_LOOKBACK, "lookback": MAX_LOOKBACK, "graph_lookback": MAX_LOOKBACK, "hidden": MAX_WIDTH,
        "layers": MAX_LAYERS, "epochs": MAX_EPOCHS, "patience": MAX_EPOCHS, "tune_epochs": MAX_EPOCHS,
        "batch_size": MAX_BATCH}
    #: attributes a copy shares with the original instead of copying (frozen or read-only objects)
    shared: ClassVar[tuple[str, ...]] = ()
    #: why :meth:`_load_state` cannot take weights while ``net`` is None (the config lacks what it is built for)
    unbuilt: ClassVar[str] = "checkpoint has weights but its config does not say what the network is built for"

    # ------------------------------------------------------------------------------------------------ tuning
    @property
    def tunable(self) -> bool:
        """Whether :meth:`tune` has a trained network to update (default: one is built)."""
        return self.net is not None

    def _tune_targets(self, series, window_idx) -> np.ndarray:
        """The targets of ``window_idx`` the network can learn from (int64; empty: nothing to tune)."""
        raise NotImplementedError

    def _tune_loss(self, series):
        """``loss(targets) -> torch scalar`` on ``series`` (default: the training loss ``self._loss_fn(series)``)."""
        return self._loss_fn(series)

    def _tune_plan(self) -> dict:
        """``{"epochs", "lr", "seed", "shuffle"}`` of one online update."""
        raise NotImplementedError

    def tune(self, dataset, window_idx, **kw) -> dict:
        """``epochs`` Adam passes over the usable targets of ``window_idx``, all in one batch (see the module
        docstring). Returns ``{"steps", "loss"}`` (the last pass's loss) and :func:`fit_loop`'s
        report, ``{}`` when the network is not trained yet, ``{"steps": 0}`` when the window has nothing to learn."""
        if not self.tunable:
            return {}
        items = self._tune_targets(dataset, window_idx)
        plan = self._tune_plan()
        if items.size == 0 or plan["epochs"] < 1:
            return {"steps": 0}
        info = fit_loop(self.net, self._tune_loss(dataset), items, None, epochs=plan["epochs"], lr=plan["lr"],
                        batch_size=len(items), early_stopping=False, seed=plan["seed"], shuffle=plan["shuffle"])
        return {"steps": info["epochs"], "loss": info["train_loss"], **info}

    # ------------------------------------------------------------------------------------------------ state
    def _state(self) -> dict:
        if self.net is None:
            return {}
        return {k: v.detach().clone() for k, v in self.net.state_dict().items()}

    def _weights(self, state: dict) -> dict:
        """The tensors of a checkpoint as the network takes them (default: as stored)."""
        return state

    def _net_description(self) -> str:
        """What the weights must fit, for the error message."""
        return "this model"

    def _load_state(self, state: dict) -> None:
        if self.net is None:
            raise SurrogateError(f"{self.name}: {self.unbuilt}")
        try:
            self.net.load_state_dict(self._weights(state), strict=True)
        except (RuntimeError, KeyError) as exc:
            raise SurrogateError(f"{self.name}: checkpoint weights do not fit {self._net_description()}: "
                                 f"{str(exc).splitlines()[0]}") from None
        self.net.eval()
        self._loaded()

    def _loaded(self) -> None:
        """Called after weights were loaded (default: nothing)."""

    # ------------------------------------------------------------------------------------------------ copies
    def __deepcopy__(self, memo):
        for name in self.shared:
            obj = self.__dict__.get(name)
            if obj is not None:
                memo[id(obj)] = obj  # shared, wherever it is referenced (e.g. inside the network)
        new = object.__new__(type(self))
        memo[id(self)] = new
        for k, v in self.__dict__.items():
            new.__dict__[k] = copy.deepcopy(v, memo)
        return new
