"""surrogate: iteration-time models for the hybrid loop. ``surrogate.load(spec)`` resolves a model name
(``ridge``, ``ridge:k=8``) or a checkpoint folder (see :mod:`surrogate.loading`)."""

from __future__ import annotations

__all__ = ["ModelSource", "load"]


def __getattr__(name):  # lazy: importing a submodule (the CLI's surrogate.cli) imports no model and no numpy
    if name in __all__:
        from . import loading

        return getattr(loading, name)
    raise AttributeError(f"module 'surrogate' has no attribute {name!r}")
