"""The pretrained surrogate: one small network trained across a corpus of runs (``hybridsim pretrain``), shipped
inside the package, ready from a job's first simulated iteration and tuned online.

It predicts the job's next iteration time (the mean over its ranks, what a bulk-synchronous job's completion follows),
from each rank's view, as a correction to the rank's own level:

    ŷ = level · exp(net(features) + bias),   level = geometric mean of the rank's look-back (up to 8 truths)

so an untrained network (zero output layer, ``weights=none``) is the geometric-mean look-back, and every input is
relative to the job itself, which is what lets one network serve 8-rank and 512-rank jobs, microsecond and
millisecond iterations (:func:`features`):

* the look-back's log deviations from the level, which of them are present, and how far apart they are;
* where the prediction sits: iterations since the last truth (a fast-forward predicts many iterations from one
  window), the target's position in the job (early iterations run beside co-runners that are still in lockstep);
* what the job is (:class:`~surrogate.base.JobInfo`): workload kind, ranks, bytes per iteration, groups spanned,
  machine size;
* the co-runner load when the last truth ran and now, so a job starting or ending beside it moves the prediction
  before any truth of the new mix exists.

Online, ``fit``/``tune`` learn one scalar per job: the mean log error of the network's one-step predictions of the
job's truth iterations (the job's time, the mean over its ranks, against the mean of the per-rank predictions, as
the loop's ``sync: skew`` (the default) and ``job`` use them), shrunk towards 0 by ``tune_prior`` pseudo-observations.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from scipy.special import erf as _erf

from ..base import KNOWN_WORKLOADS, MAX_WIDTH, Context, JobInfo, SeriesView, SurrogateError
from ..torch_surrogate import TorchSurrogate

#: the shipped checkpoint (``scripts/build-pretrained.sh`` rebuilds it)
SHIPPED = Path(__file__).resolve().parent.parent / "checkpoints" / "pretrained"

#: look-back of the features (truth iterations per rank)
LOOKBACK = 8

#: a correction never moves the level by more than exp(+-CLIP) (~4.5x): no corpus job's iterations vary by more
CLIP = 1.5

FEATURE_NAMES = (
    [f"lag{k}_dev" for k in range(LOOKBACK)] + [f"lag{k}_present" for k in range(LOOKBACK)]
    + ["present_frac", "log_gap", "next_to_truth", "log_span", "position", "log_target", "log_last_truth",
       "rank_dev"]
    + [f"kind_{k}" for k in KNOWN_WORKLOADS] + ["kind_other"]
    + ["has_info", "log_ranks", "log_bytes", "groups_frac", "log_machine"]
    + ["load_last", "load_now", "load_change"])
N_FEATURES = len(FEATURE_NAMES)

#: input groups a model may use (``inputs``); the others are zeroed. The shipped model uses ``history,kind``: on the
#: validation runs of its corpus the job descriptors and the co-runner load made it worse (benchmarks/RESULTS.md)
INPUT_GROUPS = {
    "history": [n for n in FEATURE_NAMES if n.startswith(("lag", "present_frac", "log_gap", "next_to_truth",
                                                          "log_span", "position", "log_target", "log_last_truth",
                                                          "rank_dev"))],
    "kind": [n for n in FEATURE_NAMES if n.startswith("kind_")],
    "job": ["has_info", "log_ranks", "log_bytes", "groups_frac", "log_machine"],
    "load": ["load_last", "load_now", "load_change"],
}
DEFAULT_INPUTS = "history,kind"


def input_mask(inputs: str) -> np.ndarray:
    """float32 (N_FEATURES,) 1 for the features of the comma-separated ``inputs`` groups, 0 elsewhere."""
    names = [g.strip() for g in str(inputs).split(",") if g.strip()]
    bad = [g for g in names if g not in INPUT_GROUPS]
    if bad or not names:
        raise SurrogateError(f"pretrained: inputs {inputs!r}: groups are {', '.join(INPUT_GROUPS)} (comma-separated)")
    used = {f for g in names for f in INPUT_GROUPS[g]}
    return np.array([1.0 if f in used else 0.0 for f in FEATURE_NAMES], np.float32)


def features(history: np.ndarray, columns: np.ndarray | None, iteration: int | None, info: JobInfo | None,
             load: np.ndarray | None, load_now: float | None, workload: str | None = None
             ) -> tuple[np.ndarray, np.ndarray]:
    """``(X float32 (R, N_FEATURES), log level float64 (R,))`` of a context (see the module docstring).

    ``history`` (R, L) iteration times, NaN where absent; ``columns`` (L,) the iteration index of each column (-1
    padded; None: consecutive, ending at ``iteration``); ``iteration`` the last iteration before the predicted one
    (the prediction is for ``iteration + 1``); ``load`` (L,) / ``load_now``: co-runner loads (NaN/None: unknown, 0);
    ``workload``: the kind when there is no ``info`` (the gRPC service and CODES' director give contexts without one).
    The level of a rank with no history is NaN (the caller falls back)."""
    h = np.asarray(history, dtype=np.float64)[:, -LOOKBACK:]
    R, L = h.shape
    if L < LOOKBACK:
        h = np.hstack([np.full((R, LOOKBACK - L), np.nan), h])
    if columns is None:
        it = -1 if iteration is None else int(iteration)
        cols = np.arange(it - LOOKBACK + 1, it + 1)
    else:
        cols = np.asarray(columns, dtype=np.int64)[-LOOKBACK:]
        cols = np.concatenate([np.full(LOOKBACK - len(cols), -1, np.int64), cols])
    with np.errstate(invalid="ignore", divide="ignore"):
        lh = np.where(np.isfinite(h) & (h > 0), np.log(np.where(h > 0, h, 1.0)), np.nan)
    ok = np.isfinite(lh) & (cols >= 0)[None, :]
    n = ok.sum(axis=1)
    with np.errstate(invalid="ignore"):
        level = np.where(n > 0, np.where(ok, lh, 0.0).sum(axis=1) / np.maximum(n, 1), np.nan)
    dev = np.where(ok, lh - np.where(np.isfinite(level), level, 0.0)[:, None], 0.0)
    present = ok.astype(np.float64)
    seen = np.flatnonzero((cols >= 0) & ok.any(axis=0))
    last_col = int(cols[seen[-1]]) if len(seen) else -1
    first_col = int(cols[seen[0]]) if len(seen) else -1
    target = (int(iteration) + 1) if iteration is not None else last_col + 1
    gap = max(target - last_col, 1)
    n_it = info.iterations if info is not None and info.iterations > 0 else max(target + 1, 1)
    fin = np.isfinite(level)
    med = float(np.median(level[fin])) if fin.any() else 0.0
    rank_dev = np.where(fin, level - med, 0.0)
    kind = np.zeros(len(KNOWN_WORKLOADS) + 1)
    wl = info.workload if info is not None else workload
    kind[KNOWN_WORKLOADS.index(wl) if wl in KNOWN_WORKLOADS else len(KNOWN_WORKLOADS)] = 1.0
    if info is not None:
        desc = [1.0, np.log2(max(info.ranks, 1)) / 10.0, np.log2(1.0 + max(info.bytes_per_iteration, 0.0)) / 20.0,
                info.groups / max(info.machine_groups, 1), np.log2(max(info.machine_terminals, 1)) / 11.0]
    else:
        desc = [0.0] * 5
    ld = np.asarray(load, dtype=np.float64)[-LOOKBACK:] if load is not None else np.full(0, np.nan)
    ld = np.concatenate([np.full(LOOKBACK - len(ld), np.nan), ld])
    load_last = float(ld[seen[-1]]) if len(seen) and np.isfinite(ld[seen[-1]]) else 0.0
    now = float(load_now) if load_now is not None and np.isfinite(load_now) else load_last
    # in FEATURE_NAMES order: per-rank look-back, then what all ranks share, then each rank's deviation, then the job
    position = [np.log1p(gap) / 4.0, gap == 1, np.log1p(max(last_col - first_col, 0)) / 4.0, target / n_it,
                np.log1p(target) / 5.0, np.log1p(max(last_col, 0)) / 5.0]
    job = np.concatenate([kind, desc, [load_last, now, now - load_last]])
    X = np.hstack([dev, present, (n / LOOKBACK)[:, None], np.broadcast_to(np.array(position, np.float64), (R, 6)),
                   rank_dev[:, None], np.broadcast_to(job, (R, len(job)))])
    return X.astype(np.float32), level


class PretrainedNet(torch.nn.Module):
    """features -> log correction; the output layer starts at zero (the untrained net is the level)."""

    def __init__(self, n_features: int = N_FEATURES, hidden: int = 64):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(n_features, hidden), torch.nn.GELU(),
                                        torch.nn.Linear(hidden, hidden), torch.nn.GELU())
        self.out = torch.nn.Linear(hidden, 1)
        torch.nn.init.zeros_(self.out.weight)
        torch.nn.init.zeros_(self.out.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.body(x)).squeeze(-1)


class Pretrained(TorchSurrogate):
    """See the module docstring. ``weights``: ``shipped`` (the packaged checkpoint, with its own ``inputs`` and
    ``hidden``), ``none`` (untrained: the geometric-mean look-back, the base-only ablation), a checkpoint folder
    (``hybridsim pretrain -o CKPT``; its ``inputs`` and ``hidden`` too) or a ``model.safetensors`` file, paths
    relative to the working directory (``pretrained:weights=ckpt/model.safetensors``); ``tune``: learn the per-job
    bias online; ``tune_prior``: pseudo-observations of bias 0 the online bias is shrunk with; ``hidden``: width;
    ``inputs``: the feature groups used (:data:`INPUT_GROUPS`). Its online update is the bias (:meth:`tune`), not a
    gradient step; its checkpoint state is the network's."""

    name = "pretrained"
    lookback = LOOKBACK
    bounds = {"hidden": MAX_WIDTH, "tune_prior": 1e12}

    def __init__(self, weights: str = "shipped", tune: bool = True, tune_prior: float = 2.0, hidden: int | None = None,
                 inputs: str | None = None):
        folder = SHIPPED if str(weights) == "shipped" else Path(str(weights)).expanduser()
        if str(weights) == "shipped" or folder.is_dir():  # a checkpoint's network shape and inputs are its own
            shipped = _folder_config(folder)
            for key, given in (("hidden", hidden), ("inputs", inputs)):
                if given is not None and key in shipped and given != shipped[key]:
                    raise SurrogateError(f"pretrained: the weights in {weights} have {key}={shipped[key]!r}; "
                                         f"{key}={given!r} needs weights=none or a weights file")
            hidden, inputs = shipped.get("hidden", hidden), shipped.get("inputs", inputs)
        hidden = 64 if hidden is None else hidden
        inputs = DEFAULT_INPUTS if inputs is None else inputs
        self.inputs = str(inputs)
        self.mask = input_mask(self.inputs)
        self.hidden = int(hidden)
        self.do_tune = bool(tune)
        self.tune_prior = float(tune_prior)
        if self.hidden < 1 or self.tune_prior < 0:
            raise SurrogateError(f"pretrained: hidden must be >= 1 and tune_prior >= 0 (got {hidden}, {tune_prior})")
        self.net = PretrainedNet(N_FEATURES, self.hidden)
        self.net.eval()
        self.weights = str(weights)
        if self.weights == "shipped":
            self._load_file(SHIPPED / "model.safetensors")
        elif self.weights != "none":
            self._load_file(Path(self.weights).expanduser())
        self._numpy()
        self.bias = 0.0
        self._res_sum = 0.0
        self._res_n = 0
        self._seen: set[int] = set()

    def _load_file(self, path: Path) -> None:
        if path.is_dir():  # a checkpoint folder (``hybridsim pretrain -o CKPT``): its weights file
            path = path / "model.safetensors"
        if not path.is_file():
            hint = " (the package ships them; rebuild with scripts/build-pretrained.sh)" if path.parent == SHIPPED else ""
            raise SurrogateError(f"pretrained: no weights at {path}{hint}")
        from safetensors.torch import load_file

        try:
            self._load_state(load_file(str(path)))
        except SurrogateError:
            raise
        except Exception as exc:
            raise SurrogateError(f"{path}: corrupt weights: {exc}") from None

    def _numpy(self) -> None:
        """Inference runs in numpy on float64 copies of the weights (a 512-rank step is a few small matmuls)."""
        sd = {k: v.detach().double().numpy() for k, v in self.net.state_dict().items()}
        self._w = [(sd["body.0.weight"].T, sd["body.0.bias"]), (sd["body.2.weight"].T, sd["body.2.bias"]),
                   (sd["out.weight"].T, sd["out.bias"])]

    def config(self) -> dict:
        # a saved checkpoint holds its weights in model.safetensors: the constructor must not load others first
        return {"weights": "none", "tune": self.do_tune, "tune_prior": self.tune_prior, "hidden": self.hidden,
                "inputs": self.inputs}

    def correction(self, X: np.ndarray) -> np.ndarray:
        """The network's log correction of each row of ``X`` (numpy, float64)."""
        z = np.asarray(X, dtype=np.float64) * self.mask
        for k, (w, b) in enumerate(self._w):
            z = z @ w + b
            if k < 2:
                z = 0.5 * z * (1.0 + _erf(z / np.sqrt(2.0)))  # exact GELU, as torch's default
        return np.clip(z[:, 0], -CLIP, CLIP)

    def _raw(self, ctx: Context) -> np.ndarray:
        X, level = features(ctx.history, ctx.columns, ctx.iteration, ctx.info, ctx.load, ctx.load_now, ctx.workload)
        return np.exp(level + self.correction(X))

    def predict(self, ctx: Context) -> np.ndarray:
        return self._raw(ctx) * np.exp(self.bias)

    # -------------------------------------------------------------------------------------------- online
    def fit(self, dataset: SeriesView, train_idx, val_idx=None, **kw) -> dict:
        self.bias, self._res_sum, self._res_n, self._seen = 0.0, 0.0, 0, set()
        return self.tune(dataset, train_idx)

    def tune(self, dataset: SeriesView, window_idx, **kw) -> dict:
        """Fold the one-step errors of the truth iterations in ``window_idx`` (each predicted from the truths before
        it, as the loop's contexts are) into the job's bias; each iteration counts once."""
        if not self.do_tune:
            return {"bias": self.bias, "targets": 0}
        y = np.asarray(dataset.y, dtype=np.float64)
        have = np.isfinite(y).any(axis=0)
        load = None if dataset.load is None else np.asarray(dataset.load, dtype=np.float64)
        used = 0
        for t in sorted(int(i) for i in window_idx):
            if t in self._seen or not (0 <= t < y.shape[1]) or not have[t]:
                continue
            cols = np.flatnonzero(have[:t])[-LOOKBACK:]
            if not len(cols):
                continue
            ctx = Context(dataset.job, dataset.workload, y[:, cols], iteration=t - 1, columns=cols,
                          info=dataset.info, load=None if load is None else load[cols],
                          load_now=None if load is None else float(load[t]))
            p = self._raw(ctx)
            ok = np.isfinite(p) & np.isfinite(y[:, t]) & (p > 0) & (y[:, t] > 0)
            if not ok.any():
                continue
            # the job's time (mean over ranks) against what the loop makes of the predictions (their mean,
            # hybridsim.hybrid.job_time)
            self._res_sum += float(np.log(np.mean(y[ok, t]) / np.mean(p[ok])))
            self._res_n += 1
            self._seen.add(t)
            used += 1
        self.bias = self._res_sum / (self._res_n + self.tune_prior) if self._res_n else 0.0
        return {"bias": self.bias, "targets": used}

    # -------------------------------------------------------------------------------------------- checkpoints
    def _weights(self, state: dict) -> dict:
        return {k: v.float() for k, v in state.items()}

    def _net_description(self) -> str:
        return f"a {N_FEATURES}-feature, {self.hidden}-wide net"

    def _loaded(self) -> None:
        self._numpy()


def _folder_config(folder: Path) -> dict:
    """The ``config.json`` options of a checkpoint folder ({} when absent or unreadable: the weights check then
    reports what is wrong)."""
    import json

    try:
        cfg = (folder / "config.json")
        if cfg.stat().st_size > 1 << 20:
            return {}
        return dict(json.loads(cfg.read_text()).get("config", {}))
    except (OSError, ValueError, AttributeError, TypeError, RecursionError):
        return {}
