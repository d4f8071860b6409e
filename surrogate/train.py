"""Training per job of a dataset (the early-stopping loop of the torch models is
:func:`surrogate.torch_surrogate.fit_loop`).

Models are trained per job (one model per :class:`~surrogate.dataset.JobSeries`): ``fit(series, train_idx, val_idx)``
where the index arrays list the **target** iterations ``t`` the model may learn from (it builds
``series.context(t - 1, L, Lg)`` to predict ``y[:, t]``). A trained dataset checkpoint is a folder::

    CKPT/train.json      {"format": "hybridsim-surrogate-checkpoints", "model", "topology", "jobs": {job: dir}, ...}
    CKPT/<job>/          one :meth:`surrogate.base.Surrogate.save` checkpoint per job (config.json + model.safetensors)
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from .base import Surrogate
from .graphs import shape_dict
from .loading import CKPT_FORMAT, load_checkpoints, load_surrogate  # noqa: F401  (re-exported)


# ------------------------------------------------------------------------------------------------ dataset training
def fit_jobs(series: dict, new_model: Callable[[], Surrogate], progress: bool = False, seed: int = 0
             ) -> tuple[dict[str, Surrogate], dict[str, dict]]:
    """One model per job: ``new_model()`` (after ``torch.manual_seed(seed)``) fitted on the job's train split, its
    validation split for early stopping. ``series``: ``{job: JobSeries}``. Returns ``({job: model}, {job: fit info})``
    (the info has the fit's ``seconds``)."""
    models: dict[str, Surrogate] = {}
    info: dict[str, dict] = {}
    for name, s in series.items():
        torch.manual_seed(seed)
        m = new_model()
        t0 = time.perf_counter()
        fi = dict(m.fit(s, s.indices("train"), s.indices("val"), progress=progress, seed=seed) or {})
        fi.setdefault("seconds", time.perf_counter() - t0)
        models[name], info[name] = m, fi
    return models, info


def train_dataset(dataset, model: str, out: str | Path | None = None, *, jobs: list[str] | None = None,
                  config: dict | None = None, progress: bool = False, seed: int = 0) -> dict:
    """Fit one ``model`` per job of ``dataset`` on its train split (validation split for early stopping); with
    ``out`` save the checkpoints (see module docstring). ``model``: a name, with options as :func:`surrogate.load`
    reads them (``lstm:hidden=32``; ``config`` wins). Returns ``{job: Surrogate}`` and the fit info in
    ``result["info"]``."""
    from .loading import split_spec
    from .registry import create

    model, options = split_spec(model)
    config = {**options, **(config or {})}
    names = list(jobs) if jobs else list(dataset.jobs)
    models, info = fit_jobs({name: dataset[name] for name in names}, lambda: create(model, **config),
                            progress=progress, seed=seed)
    if out is not None:
        save_checkpoints(models, out, dataset, model, info)
    return {"models": models, "info": info}


def save_checkpoints(models: dict[str, Surrogate], out: str | Path, dataset, model: str, info: dict | None = None):
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    jobs = {}
    for name, m in models.items():
        m.save(out / name)
        jobs[name] = name
    meta = {"format": CKPT_FORMAT, "model": model, "topology": shape_dict(dataset.shape),
            "n_ports": dataset.n_ports, "dataset": str(dataset.path) if dataset.path else None, "jobs": jobs,
            "fit": _jsonable(info or {})}
    (out / "train.json").write_text(json.dumps(meta, indent=2) + "\n")


def _jsonable(o):
    if isinstance(o, dict):
        return {str(k): _jsonable(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_jsonable(v) for v in o]
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    if isinstance(o, (int, float, str, bool)) or o is None:
        return o
    return str(o)


