"""Name -> surrogate class; ``create(name, **config)``.

Built-in models are listed in :data:`BUILTIN_MODELS` (``name: "module:Class"``, imported the first time a name is
looked up; a model module does not import the registry back); any installed package adds its own through the
entry-point group ``hybridsim.surrogates`` (``name = "module:Class"``), as hybridsim's gRPC client registers
``remote``, or with :func:`register`: the surrogate package names no module of the layers that use it."""

from __future__ import annotations

import importlib

from .base import UnknownModelError

_REGISTRY: dict[str, type] = {}

#: the built-in models: name -> ``module:Class`` (the class's ``name`` is the key)
BUILTIN_MODELS = {
    "last": "surrogate.models.history:Last",
    "mean": "surrogate.models.history:Mean",
    "ewma": "surrogate.models.history:Ewma",
    "ridge": "surrogate.models.history:Ridge",
    "lstm": "surrogate.models.lstm:LSTMSurrogate",
    "dcrnn": "surrogate.models.dcrnn:DCRNNSurrogate",
    "smart": "surrogate.models.smart:Smart",
    "smart-nollm": "surrogate.models.smart:SmartNoLLM",
    "pretrained": "surrogate.models.pretrained:Pretrained",
}

#: entry-point group of surrogate plug-ins (pyproject ``[project.entry-points."hybridsim.surrogates"]``)
ENTRY_POINT_GROUP = "hybridsim.surrogates"


def register(cls):
    _REGISTRY[cls.name] = cls
    return cls


def _load_builtin(name: str) -> None:
    module, _, cls = BUILTIN_MODELS[name].partition(":")
    register(getattr(importlib.import_module(module), cls))


def _load_plugins() -> None:
    from importlib.metadata import entry_points

    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name not in _REGISTRY:
            register(ep.load())


def _load_all() -> None:
    for name in BUILTIN_MODELS:
        if name not in _REGISTRY:
            _load_builtin(name)
    _load_plugins()


def available() -> list[str]:
    _load_all()
    return sorted(_REGISTRY)


def model_class(name: str) -> type:
    """The registered class of ``name``; :class:`~surrogate.base.SurrogateError` if there is none."""
    if name not in _REGISTRY:
        if name in BUILTIN_MODELS:
            _load_builtin(name)
        else:
            _load_plugins()
    if name not in _REGISTRY:
        raise UnknownModelError(f"unknown surrogate model {name!r}; available: {', '.join(available())}")
    return _REGISTRY[name]


def check_config(name: str, config: dict) -> type:
    """Check that ``create(name, **config)`` would succeed (see ``Surrogate.check_config``); returns the class."""
    cls = model_class(name)
    cls.check_config(dict(config))
    return cls


def create(name: str, **config):
    return model_class(name)(**config)
