"""The base of the surrogates whose learned state is one torch module (lstm, dcrnn, smart, smart-nollm, pretrained).

PyG's ``BasicGNN`` pattern: what every torch model does with its network is written here once, and a model is its
network, its inputs and its loss on top.

* Online tuning (:meth:`TorchSurrogate.tune`): ``epochs`` passes of Adam over the usable targets of the new window, all
  of them in one batch, gradient norm clipped at 1 (:func:`surrogate.train.fit_loop` without early stopping). A model
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
from typing import ClassVar

import numpy as np

from .base import Surrogate, SurrogateError


class TorchSurrogate(Surrogate):
    """A surrogate whose learned state is ``self.net``, a ``torch.nn.Module`` (None until the model knows the shapes
    it is built for). See the module docstring for what a subclass provides."""

    net = None
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
        docstring). Returns ``{"steps", "loss"}`` (the last pass's loss) and :func:`~surrogate.train.fit_loop`'s
        report, ``{}`` when the network is not trained yet, ``{"steps": 0}`` when the window has nothing to learn."""
        from .train import fit_loop

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
