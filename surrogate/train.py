"""Training: a generic early-stopping loop for torch models and per-job training of a dataset.

Models are trained per job (one model per :class:`~surrogate.dataset.JobSeries`): ``fit(series, train_idx, val_idx)``
where the index arrays list the **target** iterations ``t`` the model may learn from (it builds
``series.context(t - 1, L, Lg)`` to predict ``y[:, t]``). A trained dataset checkpoint is a folder::

    CKPT/train.json      {"format": "hybridsim-surrogate-checkpoints", "model", "topology", "jobs": {job: dir}, ...}
    CKPT/<job>/          one :meth:`surrogate.base.Surrogate.save` checkpoint per job (config.json + model.safetensors)
"""

from __future__ import annotations

import copy
import json
import math
import time
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from .base import Surrogate, SurrogateError
from .graphs import shape_dict
from .loading import CKPT_FORMAT, load_checkpoints, load_surrogate  # noqa: F401  (re-exported)


def fit_loop(module: torch.nn.Module, loss_fn: Callable[[np.ndarray], torch.Tensor], train_items: np.ndarray,
             val_items: np.ndarray | None = None, *, epochs: int = 100, lr: float = 3e-3, batch_size: int = 32,
             patience: int = 15, seed: int = 0, progress: bool = False, desc: str = "train",
             weight_decay: float = 0.0, early_stopping: bool = True, clip: float = 1.0, shuffle: bool = True) -> dict:
    """Adam over mini-batches of ``train_items`` (e.g. target iterations; shuffled each epoch unless not
    ``shuffle``); ``loss_fn(items)`` returns the mean loss of a batch. After each epoch the loss on ``val_items`` (or on the train items when there are none) is
    measured; training stops after ``patience`` epochs without improvement and the best weights are restored.
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


