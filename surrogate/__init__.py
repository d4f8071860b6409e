"""surrogate: iteration-time models for the hybrid loop. ``surrogate.load(spec)`` resolves a model name
(``ridge``, ``ridge:k=8``) or a checkpoint folder (see :mod:`surrogate.loading`)."""

from .loading import ModelSource, load

__all__ = ["ModelSource", "load"]
