"""Name -> surrogate class; ``create(name, **config)``.

Built-in models are declared in :data:`BUILTIN`; any installed package adds its own through the entry-point group
``hybridsim.surrogates`` (``name = "module:Class"``), as hybridsim's gRPC client registers ``remote``: the surrogate
package names no module of the layers that use it (:func:`register` adds one by hand). A name is resolved by importing
the one module that defines it (a model module does not import the registry back), so naming or checking ``ridge``
(``hybridsim validate``) does not import torch or the other models."""

from __future__ import annotations

import importlib

import hybridsim_common.plugins as plugins

_REGISTRY: dict[str, type] = {}

#: the built-in models, name -> ``module:Class`` (the entry-point form; the class's ``name`` is the key,
#: tests/test_fast_cli.py checks that the two agree)
BUILTIN = {
    "last": "surrogate.models.history:Last",
    "mean": "surrogate.models.history:Mean",
    "ewma": "surrogate.models.history:Ewma",
    "ridge": "surrogate.models.history:Ridge",
    "flow": "surrogate.models.flow:Flow",
    "lstm": "surrogate.models.lstm:LSTMSurrogate",
    "dcrnn": "surrogate.models.dcrnn:DCRNNSurrogate",
    "smart": "surrogate.models.smart:Smart",
    "smart-nollm": "surrogate.models.smart:SmartNoLLM",
    "pretrained": "surrogate.models.pretrained:Pretrained",
    "oracle": "surrogate.models.oracle:Oracle",
}

#: the models ``hybridsim pretrain`` trains across the runs of a corpus (:mod:`surrogate.pretrain`)
PRETRAINABLE = ("pretrained",)

#: entry-point group of surrogate plug-ins (pyproject ``[project.entry-points."hybridsim.surrogates"]``)
ENTRY_POINT_GROUP = "hybridsim.surrogates"


def register(cls):
    _REGISTRY[cls.name] = cls
    return cls


#: the surrogates' plug-in registry (:class:`hybridsim_common.plugins.Registry`): its entry points (none from a
#: dist-info in the working directory), its "did you mean", its import rule
MODELS = plugins.Registry(ENTRY_POINT_GROUP, "surrogate model", BUILTIN)


def _entry_points() -> dict:
    return MODELS.entry_points()


def available() -> list[str]:
    """Every model name: registered, built in or installed (nothing is imported)."""
    return sorted(set(_REGISTRY) | set(BUILTIN) | set(_entry_points()))


def model_class(name: str) -> type:
    """The registered class of ``name`` (importing its module on first use); :class:`~surrogate.base.SurrogateError`
    if there is none."""
    if name not in _REGISTRY:
        if name in BUILTIN:
            mod, _, attr = BUILTIN[name].partition(":")
            cls = getattr(importlib.import_module(mod), attr)
        else:
            ep = _entry_points().get(name)
            if ep is None:
                from .base import UnknownModelError  # this module imports nothing (numpy neither): the CLI reads it

                raise UnknownModelError(f"unknown surrogate model {name!r}{plugins.did_you_mean(name, available())}; "
                                        f"available: {', '.join(available())}")
            cls = MODELS.load(name)  # the entry point's module imported under the plug-ins' rule
        _REGISTRY.setdefault(name, cls)
    return _REGISTRY[name]


def check_config(name: str, config: dict) -> type:
    """Check that ``create(name, **config)`` would succeed (see ``Surrogate.check_config``); returns the class."""
    cls = model_class(name)
    cls.check_config(dict(config))
    return cls


def create(name: str, **config):
    """A new ``name`` model built with ``config``, its options' bounds (``Surrogate.bounds``) checked first."""
    from .base import check_bounds

    cls = model_class(name)
    check_bounds(cls, config)
    return cls(**config)
