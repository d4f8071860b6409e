"""``hybridsim pretrain CORPUS -o CKPT --model pretrained``: train one surrogate across the runs of a corpus
(``hybridsim corpus``), held out by whole run.

Examples are drawn from each completed run as the hybrid loop will meet them (:func:`run_examples`): for a job, a
"last truth" iteration t0, a look-back of 1-8 truths at or before t0 (consecutive, or spread like truth windows
``stride`` apart; a one-iteration warm-up is drawn often), and a target ``h`` iterations after t0 (a fast-forward
predicts up to Ft iterations from one window). Inputs are causal: only iterations up to t0 and the co-runner load
when the target starts (known in the loop: which jobs are running). Iteration times are divided by the iteration's
relative message volume where it varies (LAMMPS), as the loop's ``surrogate.volume_scaling`` does.

Runs are split by whole run with a seeded permutation: ``test_frac`` of them for test (touched once, after training,
for the figures in ``pretrain.json``), ``val_frac`` for validation (early stopping), the rest for training.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

from .base import JobInfo, SurrogateError
from .registry import PRETRAINABLE  # noqa: F401 (the models this module trains; declared in the registry)
from .volumes import relative_volumes


def corpus_run_dirs(corpus: str | Path, left_out: list | None = None) -> list[Path]:
    """The completed runs of a corpus folder (its ``corpus.json``), in run order; each must lie inside the corpus.
    ``left_out``, when given, receives the ``dir`` of every run that is not completed (failed or pending)."""
    from hybridsim_common.rundir import RunDirError, load_corpus_index

    corpus = Path(corpus)
    cj = corpus / "corpus.json"
    try:
        meta = load_corpus_index(cj)
    except FileNotFoundError:
        raise SurrogateError(f"{cj}: missing (a corpus folder is written by `hybridsim corpus SPEC -o DIR`)") from None
    except RunDirError as exc:
        raise SurrogateError(str(exc)) from None
    entries = meta.get("runs") if isinstance(meta, dict) else None
    if not isinstance(entries, list) or not all(isinstance(r, dict) for r in entries):
        raise SurrogateError(f"{cj}: unreadable corpus index: field 'runs' must be a list of objects")
    runs = []
    for k, r in enumerate(entries):
        if r.get("status") != "completed":
            if left_out is not None:
                left_out.append(f"{r.get('dir')} ({r.get('status')})")
            continue
        d = r.get("dir")
        if not isinstance(d, str) or not d or Path(d).is_absolute() or ".." in Path(d).parts:
            raise SurrogateError(f"{cj}: field 'runs[{k}].dir' must be a folder inside the corpus, not {d!r}")
        runs.append(corpus / d)
    if not runs:
        raise SurrogateError(f"{corpus}: no completed run (build it with `hybridsim corpus`)")
    return runs


def job_tables(run_dir: Path) -> list[dict]:
    """Per foreground job of a run: ``y`` (R, T) volume-normalised iteration times, ``load`` (T,) co-runner load at
    each iteration's start, ``info`` its :class:`JobInfo`, ``name``. Raises :class:`SurrogateError` naming the file
    for a table that does not fit its description (a job, rank or iteration it does not have, a time that is not
    finite, an end before its start)."""
    from hybridsim_common.records import read_iterations
    from hybridsim_common.rundir import RunDirError, read_description

    try:
        desc = read_description(run_dir)
    except RunDirError as exc:
        raise SurrogateError(str(exc)) from None
    f = Path(run_dir) / "iterations.parquet"
    try:
        tab = read_iterations(f).to_pydict()
    except (OSError, ValueError) as exc:  # pyarrow's errors are OSError or ValueError
        raise SurrogateError(f"{f}: unreadable iterations table: {exc}") from None
    jid = np.asarray(tab["job_id"], np.int64)
    rank = np.asarray(tab["rank"], np.int64)
    it = np.asarray(tab["iteration"], np.int64)
    start = np.asarray(tab["start"], np.float64)
    end = np.asarray(tab["end"], np.float64)
    _check_table(f, desc, jid, rank, it, start, end)
    spans, bg_ranks, jobs = {}, 0, []
    for k, j in enumerate(desc.jobs):
        sel = jid == k
        if j.iterations is None:
            bg_ranks += j.ranks
            continue
        if sel.any():
            spans[k] = (float(start[sel].min()), float(end[sel].max()))
    for k, j in enumerate(desc.jobs):
        if j.iterations is None or k not in spans:
            continue
        sel = jid == k
        T = int(it[sel].max()) + 1
        if j.ranks * T > 16 * int(sel.sum()) + 4096:  # dense (ranks, T) arrays for a table that fills few cells
            raise SurrogateError(f"{f}: job {j.name!r} has {int(sel.sum())} rows for {j.ranks} ranks x {T} "
                                 "iterations; a table that sparse is not a run's")
        y = np.full((j.ranks, T), np.nan)
        s = np.full((j.ranks, T), np.nan)
        y[rank[sel], it[sel]] = end[sel] - start[sel]
        s[rank[sel], it[sel]] = start[sel]
        v = relative_volumes(j.volumes[:T]) if j.volumes is not None and len(j.volumes) >= T else None
        if v is not None:
            y = y / v[None, :]
        info = JobInfo.of(j.workload, j.ranks, j.iterations, j.volumes, j.terminals, desc.shape)
        t_start = np.nanmin(s, axis=0)
        other = np.full(T, float(bg_ranks))
        for k2, (a, b) in spans.items():
            if k2 != k:
                other += desc.jobs[k2].ranks * ((a <= t_start) & (t_start < b))
        jobs.append({"name": j.name, "y": y, "load": other / max(info.machine_terminals, 1), "info": info})
    return jobs


def _check_table(f: Path, desc, jid, rank, it, start, end) -> None:
    """:class:`SurrogateError` unless every row of ``iterations.parquet`` (``f``) is a rank (and, for a foreground
    job, an iteration) of a job of the description, with finite times and ``start <= end``: what :func:`job_tables`
    indexes arrays with."""
    if not (np.isfinite(start).all() and np.isfinite(end).all()):
        raise SurrogateError(f"{f}: non-finite start or end times (row {int(np.argmin(np.isfinite(start + end)))})")
    if (end < start).any():
        raise SurrogateError(f"{f}: an iteration ends before it starts (row {int(np.argmax(end < start))})")
    ok_job = (jid >= 0) & (jid < len(desc.jobs))
    if not ok_job.all():
        raise SurrogateError(f"{f}: job_id {int(jid[~ok_job][0])} is not a job of its description.json")
    ranks = np.array([j.ranks for j in desc.jobs], np.int64)[jid]
    iters = np.array([-1 if j.iterations is None else j.iterations for j in desc.jobs], np.int64)[jid]
    bad = (rank < 0) | (rank >= ranks) | ((iters >= 0) & ((it < 0) | (it >= iters)))  # background: no iterations
    if bad.any():
        k = int(np.argmax(bad))
        j = desc.jobs[int(jid[k])]
        raise SurrogateError(f"{f}: row {k}: rank {int(rank[k])}, iteration {int(it[k])} lies outside job "
                             f"{j.name!r} ({j.ranks} ranks x {j.iterations} iterations, description.json)")


def run_examples(run_dir: Path, rng: np.random.Generator, *, samples_per_job: int = 96, max_ranks: int = 16,
                 max_gap: int = 128, group0: int = 0) -> dict[str, np.ndarray]:
    """``{"X" (N, F), "target" (N,), "level" (N,) log level, "last" (N,) log of the latest truth, "mean" (N,) log of
    the look-back's arithmetic mean, "rank_true" (N,)
    log of the rank's own time, "t0" (N,) last-truth iteration, "group" (N,) sample id (from ``group0``)}`` of one
    run (see the module docstring). The target is the log of the job's iteration time -- the mean over all its
    ranks of their times of the target iteration -- relative to the rank's level. The loop advances a predicted
    iteration of a job by one time for all its ranks (``sync: skew``, the default, and ``job``: the mean of the
    per-rank predictions), and in a bulk-synchronous job every rank's times sum to the same completion time, so the
    job advances by the mean over ranks per iteration, not by the median: a nearest-neighbour rank's own time varies ~20 % around it, right-skewed
    (a rank that waited for a late neighbour), and does not persist (it catches up in the next iteration)."""
    from .models.pretrained import LOOKBACK, N_FEATURES, features

    parts = []  # one dict of arrays per sampled context
    g = group0
    for job in job_tables(run_dir):
        y, load, info = job["y"], job["load"], job["info"]
        R, T = y.shape
        if T < 2:
            continue
        ranks = np.unique(np.linspace(0, R - 1, min(R, max_ranks)).astype(int))
        for _ in range(min(samples_per_job, 3 * T)):
            t0 = 0 if rng.random() < 0.15 else int(rng.integers(0, T - 1))
            n = int(rng.integers(1, LOOKBACK + 1))
            stride = 1 if rng.random() < 0.5 else int(rng.integers(2, 33))
            cols = t0 - stride * np.arange(n)[::-1]
            cols = cols[cols >= 0]
            hmax = min(max_gap, T - 1 - t0)
            h = int(min(hmax, max(1, round(np.exp(rng.uniform(0.0, np.log(hmax + 1))) - 0.5))))
            target = t0 + h
            hist = y[np.ix_(ranks, cols)]
            Xi, level = features(hist, cols, target - 1, info, load[cols], float(load[target]))
            yt = y[ranks, target]
            col = y[:, target]
            ok = np.isfinite(level) & np.isfinite(yt) & (yt > 0) & np.isfinite(hist[:, -1])
            if not ok.any() or not (np.isfinite(col) & (col > 0)).any():
                continue
            job_t = np.log(np.mean(col[np.isfinite(col) & (col > 0)]))
            k = int(ok.sum())
            with np.errstate(invalid="ignore"):
                mean = np.log(np.nanmean(hist[ok], axis=1))  # MEAN: arithmetic mean of the look-back
            parts.append({"X": Xi[ok], "target": job_t - level[ok], "level": level[ok], "last": np.log(hist[ok, -1]),
                          "mean": mean, "rank_true": np.log(yt[ok]), "t0": np.full(k, t0), "group": np.full(k, g)})
            g += 1
    if not parts:
        return {"X": np.zeros((0, N_FEATURES), np.float32), "target": np.zeros(0), "level": np.zeros(0),
                "last": np.zeros(0), "mean": np.zeros(0), "rank_true": np.zeros(0), "t0": np.zeros(0, np.int64),
                "group": np.zeros(0, np.int64)}
    return {key: np.concatenate([part[key] for part in parts]) for key in parts[0]}


def split_runs(names: list[str], seed: int, val_frac: float, test_frac: float) -> dict[str, list[str]]:
    """Whole-run split: a seeded permutation; ``test`` first, then ``val``, the rest ``train`` (each >= 1 run when
    there are >= 3)."""
    if not (0 <= val_frac < 1 and 0 <= test_frac < 1 and val_frac + test_frac < 1):
        raise SurrogateError(f"val_frac and test_frac must be in [0, 1) with a sum below 1 (got {val_frac}, "
                             f"{test_frac})")
    order = [names[i] for i in np.random.default_rng(seed).permutation(len(names))]
    n = len(order)
    n_test = max(1, round(test_frac * n)) if test_frac > 0 and n >= 3 else 0
    n_val = max(1, round(val_frac * n)) if val_frac > 0 and n - n_test >= 2 else 0
    return {"test": sorted(order[:n_test]), "val": sorted(order[n_test:n_test + n_val]),
            "train": sorted(order[n_test + n_val:])}


def _mape(pred_log: np.ndarray, true_log: np.ndarray) -> float | None:
    return float(np.mean(np.abs(np.exp(pred_log - true_log) - 1.0)) * 100.0) if len(true_log) else None


def _job_level(values: np.ndarray, group: np.ndarray) -> np.ndarray:
    """Median of ``values`` per sample ``group``, in group order (the job-level prediction of :func:`scores`; the
    loop itself advances a job by the mean, :func:`hybridsim.hybrid.job_time`)."""
    order = np.argsort(group, kind="stable")
    _, starts = np.unique(group[order], return_index=True)
    return np.array([np.median(part) for part in np.split(values[order], starts[1:])])


def scores(model, ex: dict) -> dict:
    """MAPE % on examples ``ex`` of the model (without its online bias), of the untrained look-back (``base``), of
    LAST and of MEAN (the look-back's arithmetic mean): ``job`` the median prediction over a sample's ranks (the
    loop advances by their mean) against the job's iteration time (the mean over its ranks: what its completion time
    follows), ``rank`` each rank's prediction against its own time; ``zero_shot``: the same on the one-iteration
    warm-up examples alone (``t0 = 0``)."""
    baselines = (("base", ex["level"]), ("last", ex["last"]), ("mean", ex["mean"]))
    pred = ex["level"] + model.correction(ex["X"]) if len(ex["level"]) else ex["level"]
    true_job = ex["level"] + ex["target"]

    def block(sel):
        g = ex["group"][sel]
        if not sel.any():
            return None
        tj = _job_level(true_job[sel], g)
        return {"examples": int(sel.sum()), "samples": int(len(tj)),
                "job": {name: _mape(_job_level(v[sel], g), tj) for name, v in (("model", pred), *baselines)},
                "rank": {name: _mape(v[sel], ex["rank_true"][sel]) for name, v in (("model", pred), *baselines)}}

    out = block(np.ones(len(pred), bool))
    if out is None:
        return {"examples": 0}
    out["zero_shot"] = block(ex["t0"] == 0)
    return out


def check_options(*, epochs: int, patience: int = 25, val_frac: float = 0.2, test_frac: float = 0.15,
                  hidden: int = 64, lr: float = 1e-3, batch: int = 512) -> None:
    """:class:`SurrogateError` for a training option :func:`pretrain` cannot run with."""
    import math

    for name, v, lo in (("epochs", epochs, 1), ("patience", patience, 1), ("hidden", hidden, 1), ("batch", batch, 1)):
        if not isinstance(v, int) or isinstance(v, bool) or v < lo:
            raise SurrogateError(f"pretrain: {name} must be an integer >= {lo}, got {v!r}")
    if hidden > 4096:
        raise SurrogateError(f"pretrain: hidden must be <= 4096, got {hidden}")
    if not (isinstance(lr, (int, float)) and math.isfinite(lr) and lr > 0):
        raise SurrogateError(f"pretrain: lr must be a finite number > 0, got {lr!r}")
    for name, v in (("val_frac", val_frac), ("test_frac", test_frac)):
        if not (isinstance(v, (int, float)) and math.isfinite(v)):
            raise SurrogateError(f"pretrain: {name} must be a number in [0, 1), got {v!r}")


def pretrain(corpus, model: str = "pretrained", *, seed: int = 0, epochs: int = 300,
             patience: int = 25, val_frac: float = 0.2, test_frac: float = 0.15, hidden: int = 64,
             inputs: str | None = None, lr: float = 1e-3, batch: int = 512, score_test: bool = True,
             progress: bool = False) -> tuple[object, dict]:
    """Train ``model`` across the completed runs of ``corpus`` (a corpus folder or a list of them, each split
    separately, so every corpus has runs in each part); returns ``(model, report)``. The report holds the
    split (run names), the runs left out (not completed, per corpus, keyed by the corpus folder's name: the report
    holds names, never the build machine's paths, since a checkpoint is shipped), the example counts, the training curve's best
    epoch and the validation and test scores
    (:func:`scores`; ``score_test=False`` leaves the test runs untouched, for design choices made on validation)."""
    check_options(epochs=epochs, patience=patience, val_frac=val_frac, test_frac=test_frac, hidden=hidden, lr=lr,
                  batch=batch)
    import torch

    from .registry import create

    if model not in PRETRAINABLE:
        raise SurrogateError(f"pretrain: model {model!r} cannot be trained across runs; pretrainable: "
                             f"{', '.join(PRETRAINABLE)}")
    t_start = time.perf_counter()
    corpora = [Path(c) for c in ([corpus] if isinstance(corpus, (str, Path)) else corpus)]
    names, runs, split = [], [], {"test": [], "val": [], "train": []}
    left_out = {}
    for c in corpora:
        skipped = []
        mine = corpus_run_dirs(c, skipped)
        if skipped:
            left_out[c.name] = skipped
        labels = [f"{c.name}/{p.name}" if len(corpora) > 1 else p.name for p in mine]
        for part, members in split_runs(labels, seed, val_frac, test_frac).items():
            split[part] += members
        names += labels
        runs += mine
    if len(set(names)) != len(names):
        raise SurrogateError(f"pretrain: two corpora share a folder name ({', '.join(map(str, corpora))})")
    if not split["train"]:
        raise SurrogateError(f"{', '.join(map(str, corpora))}: {len(runs)} completed run(s) leave none to train on")
    by_name = dict(zip(names, runs))
    sets = {}
    for part, members in split.items():
        if part == "test" and not score_test:
            continue
        exs = [run_examples(by_name[n], np.random.default_rng([seed, int(i)]), group0=i * 1_000_000)
               for i, n in ((names.index(n), n) for n in members)]
        sets[part] = {k: np.concatenate([e[k] for e in exs]) for k in exs[0]} if exs else None
        if progress:
            print(f"pretrain: {part}: {len(members)} runs, "
                  f"{0 if sets[part] is None else len(sets[part]['target'])} examples", file=sys.stderr, flush=True)
    if not len(sets["train"]["target"]):
        raise SurrogateError(f"{', '.join(map(str, corpora))}: the training runs give no example (every job has "
                             "fewer than 2 iterations)")
    if sets.get("val") is not None and not len(sets["val"]["target"]):
        sets["val"] = None  # nothing to stop on: the training loss is watched instead
    torch.manual_seed(seed)
    from .models.pretrained import DEFAULT_INPUTS

    m = create(model, weights="none", hidden=hidden, inputs=inputs or DEFAULT_INPUTS)
    net = m.net
    net.train()
    opt = torch.optim.AdamW(net.parameters(), lr=lr, weight_decay=1e-4)
    Xtr = torch.from_numpy(sets["train"]["X"] * m.mask)
    ytr = torch.from_numpy(sets["train"]["target"]).float()
    val = sets.get("val")
    Xva = torch.from_numpy(val["X"] * m.mask) if val is not None else None
    yva = torch.from_numpy(val["target"]).float() if val is not None else None
    gen = torch.Generator().manual_seed(seed)
    best, best_epoch, best_state, curve = np.inf, 0, None, []
    for epoch in range(1, epochs + 1):
        net.train()
        perm = torch.randperm(len(Xtr), generator=gen)
        tot = 0.0
        for k in range(0, len(perm), batch):
            idx = perm[k:k + batch]
            loss = torch.nn.functional.l1_loss(net(Xtr[idx]).clamp(-1.5, 1.5), ytr[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            tot += loss.item() * len(idx)
        net.eval()
        with torch.no_grad():
            vl = float(torch.nn.functional.l1_loss(net(Xva).clamp(-1.5, 1.5), yva)) if Xva is not None \
                else tot / len(perm)
        curve.append((epoch, tot / len(perm), vl))
        if vl < best - 1e-6:
            best, best_epoch = vl, epoch
            best_state = {k: v.detach().clone() for k, v in net.state_dict().items()}
        if progress and epoch % 10 == 0:
            print(f"pretrain: epoch {epoch}: train L1 {tot / len(perm):.5f}  val L1 {vl:.5f}  best {best:.5f} "
                  f"(epoch {best_epoch})", file=sys.stderr, flush=True)
        if epoch - best_epoch >= patience:
            break
    if best_state is None:
        raise SurrogateError(f"pretrain: the loss was never finite in {len(curve)} epoch(s); nothing to save")
    net.load_state_dict(best_state)
    net.eval()
    m._numpy()
    report = {
        "format": "hybridsim-pretrain", "model": model, "corpus": [c.name for c in corpora],  # names, not paths: a checkpoint is shipped "seed": seed,
        "config": m.config(), "split": split, "left_out": left_out,
        "examples": {k: (0 if v is None else int(len(v["target"]))) for k, v in sets.items()},
        "epochs_run": len(curve), "best_epoch": best_epoch, "val_l1": best,
        "val": scores(m, val) if val is not None else None,
        "test": scores(m, sets["test"]) if score_test and sets.get("test") is not None else None,
        "train_s": time.perf_counter() - t_start,
        "curve": [[e, round(a, 6), round(b, 6)] for e, a, b in curve],
    }
    return m, report
