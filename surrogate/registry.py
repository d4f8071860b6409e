"""Name -> surrogate class. Models register themselves with :func:`register`; ``create(name, **config)``.

Built-in models live in :data:`_MODEL_MODULES`; any installed package adds its own through the entry-point group
``hybridsim.surrogates`` (``name = "module:Class"``), as hybridsim's gRPC client registers ``remote``: the surrogate
package names no module of the layers that use it."""

from __future__ import annotations

import importlib

from .base import UnknownModelError

_REGISTRY: dict[str, type] = {}

#: modules imported lazily the first time a name is looked up
_MODEL_MODULES = ("surrogate.models.history", "surrogate.models.lstm", "surrogate.models.dcrnn",
                  "surrogate.models.smart", "surrogate.models.pretrained", "surrogate.models.oracle")

#: entry-point group of surrogate plug-ins (pyproject ``[project.entry-points."hybridsim.surrogates"]``)
ENTRY_POINT_GROUP = "hybridsim.surrogates"


def register(cls):
    _REGISTRY[cls.name] = cls
    return cls


def _load_all() -> None:
    for mod in _MODEL_MODULES:
        importlib.import_module(mod)
    from importlib.metadata import entry_points

    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name not in _REGISTRY:
            register(ep.load())


def available() -> list[str]:
    _load_all()
    return sorted(_REGISTRY)


def model_class(name: str) -> type:
    """The registered class of ``name``; :class:`~surrogate.base.SurrogateError` if there is none."""
    if name not in _REGISTRY:
        _load_all()
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
