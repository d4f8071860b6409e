"""An example plug-in surrogate: each rank's next iteration time is the median of its last ``k`` truths.

A surrogate is one class: subclass :class:`surrogate.base.Surrogate`, set ``name`` and ``lookback`` (how many past
iteration times per rank :meth:`predict` reads from ``ctx.history``, an (R, lookback) float64 array, NaN where a rank
has none yet), and implement ``predict(ctx) -> float64 (R,)`` in ns. A learned model also implements ``fit`` /
``tune`` (on a :class:`surrogate.base.SeriesView`) and ``_state`` / ``_load_state`` for checkpoints; ``config()``
returns the constructor options (a checkpoint's ``config.json``), ``bounds`` caps the options that size a loop or an
allocation (checked before anything is built). A model that predicts from its own history only may answer a
fast-forward stretch of k iterations with one prediction repeated (``predict_many``).

Register it for ``surrogate: {model: median, config: {k: 5}}`` in your package's ``pyproject.toml``::

    [project.entry-points."hybridsim.surrogates"]
    median = "examples.surrogates.median:Median"

(``tests/test_surrogate_plugin.py`` does exactly that with a scratch ``*.dist-info``, and runs it in the hybrid loop.)
"""

from __future__ import annotations

import warnings

import numpy as np

from surrogate.base import MAX_LOOKBACK, Context, Surrogate


class Median(Surrogate):
    """ŷ(t+1) = median of a rank's last ``k`` iteration times (the ones it has; NaN while it has none)."""

    name = "median"
    bounds = {"k": MAX_LOOKBACK}

    def __init__(self, k: int = 5):
        if int(k) < 1:
            raise ValueError(f"k must be at least 1, got {k}")
        self.k = self.lookback = int(k)

    def config(self) -> dict:
        return {"k": self.k}

    def predict(self, ctx: Context) -> np.ndarray:
        h = np.asarray(ctx.history, dtype=np.float64)[:, -self.k:]
        with warnings.catch_warnings():  # a rank without history: NaN, no warning
            warnings.simplefilter("ignore", RuntimeWarning)
            return np.nanmedian(h, axis=1) if h.shape[1] else np.full(h.shape[0], np.nan)

    def predict_many(self, ctx: Context, k: int) -> np.ndarray:
        """Reads only the history, which a stretch does not change: one prediction, repeated."""
        return np.repeat(self.predict(ctx).reshape(1, -1), max(int(k), 0), axis=0)
