"""``hybridsim report``: PNG plots of a run directory (or a bench directory) a person reads at a glance.

* ``iterations-<job>.png``: mean-over-ranks iteration time per iteration, truth and prediction, with the predicted
  spans shaded;
* ``port-utilisation.png``: heat map of port utilisation (%) over time, ports grouped by link class;
* ``jobs-gantt.png`` (job streams): a Gantt chart of the allocated terminals over time, one colour per job, above
  the machine's utilisation and the number of waiting jobs over time;
* ``jobs-schedule.png`` and ``jobs-queue.png`` (job streams): the scheduling Gantt chart of :func:`plot_gantt_chart`
  (a row per job: wait, run, arrival marker, label, size-class legend, killed jobs hatched) and the utilisation and
  queue length of :func:`plot_queue_over_time`, as ``hybridsim schedule --plot`` draws them;
* ``index.html`` (:mod:`hybridsim.report_index`): one page showing every plot and linking every table; in a bench,
  one more per run (``report/<run>/index.html``), whose iteration plots draw the pure run beside the hybrid one;
* ``energy.txt``: time-to-solution, energy-to-solution and energy-delay product per job (runs with a ``machine``);
* for ``hybridsim bench`` directories, ``bench-policies.png`` (speedup and completion-time error per run) and, with a
  sweep (``--sweep-ft``), ``tradeoff-ft.png`` and the error-versus-speedup curves of every surrogate:
  ``curves.txt`` (a table) and ``curves.png`` (worst-job completion error against the event speedup, one line a
  surrogate, Ft ascending to zero-shot; points averaged over the bench's seeds).

Over 600 lines: every plot of a run and of a bench (iterations, jobs, ports, streams, curves) shares its figure
helpers and the run-directory readers; the index page lives in hybridsim/report_index.py.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from .report_index import write_bench_index, write_run_index

#: policies with an ``ft`` parameter that ``hybridsim bench --sweep-ft`` sweeps (and the report plots as a trade-off)
SWEEPABLE = ("periodic", "aligned")


def _save(fig, path: Path) -> Path:
    """Lay out, write (PNG, 110 dpi) and close ``fig``; returns ``path``. Written beside and renamed into place, so a
    symbolic link at ``path`` is replaced, never followed."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    tmp = path.with_name(f".{path.name}.partial")
    try:
        fig.savefig(tmp, dpi=110, format="png")
        os.replace(tmp, path)
    finally:
        plt.close(fig)
        tmp.unlink(missing_ok=True)
    return path


def _own_dir(d: Path) -> Path:
    """Create the report folder ``d`` inside a run directory; a symbolic link there (which could lead out of the run
    directory) is refused with :class:`~hybridsim_common.rundir.RunDirError`."""
    from hybridsim_common.rundir import RunDirError

    if d.is_symlink():
        raise RunDirError(f"{d}: a symbolic link; `hybridsim report` writes only into a folder of its own inside the "
                          "run directory (remove the link, or name the folder with -o)")
    d.mkdir(parents=True, exist_ok=True)
    return d


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def mean_iteration_times(t: dict, job) -> np.ndarray:
    """Mean over ranks of a job's iteration times (ns), by iteration, from an ``iterations.parquet`` as columns."""
    sel = t["job"] == job
    it = t["iteration"][sel]
    n = int(it.max()) + 1
    dur = (t["end"] - t["start"])[sel]
    return np.bincount(it, weights=dur, minlength=n) / np.maximum(np.bincount(it, minlength=n), 1)


def plot_iterations(run_dir: Path, out_dir: Path, pure_dir: Path | None = None) -> list[Path]:
    """``iterations-<job>.png`` per job; ``pure_dir``: the pure run of the same scenario (a bench's), drawn beside the
    hybrid run's truth and predictions."""
    import pyarrow.parquet as pq

    plt = _plt()
    t = {k: np.asarray(v) for k, v in pq.read_table(run_dir / "iterations.parquet").to_pydict().items()}
    pure = None
    if pure_dir is not None and (Path(pure_dir) / "iterations.parquet").exists():
        pure = {k: np.asarray(v) for k, v in pq.read_table(Path(pure_dir) / "iterations.parquet").to_pydict().items()}
    out = []
    for job in dict.fromkeys(t["job"].tolist()):
        sel = t["job"] == job
        it = t["iteration"][sel]
        n = int(it.max()) + 1
        dur = (t["end"] - t["start"])[sel]
        mean_dur = np.bincount(it, weights=dur, minlength=n) / np.maximum(np.bincount(it, minlength=n), 1)
        fig, ax = plt.subplots(figsize=(9, 3.5))
        if pure is not None and (pure["job"] == job).any():
            pm = mean_iteration_times(pure, job)
            ax.plot(np.arange(len(pm)), pm / 1e3, "-", lw=2.5, color="0.6", alpha=0.7, label="pure run (simulated)",
                    zorder=1)
        if "mode" in t:
            mode = t["mode"][sel]
            pred_it = np.zeros(n, bool)
            pred_it[it[mode == "predict"]] = True
            truth = np.where(np.isfinite(t["truth"][sel]), t["truth"][sel], 0.0)
            has_t = np.bincount(it, weights=np.isfinite(t["truth"][sel]), minlength=n)
            tmean = np.where(has_t > 0, np.bincount(it, weights=truth, minlength=n) / np.maximum(has_t, 1), np.nan)
            pv = np.where(np.isfinite(t["predicted"][sel]), t["predicted"][sel], 0.0)
            has_p = np.bincount(it, weights=np.isfinite(t["predicted"][sel]), minlength=n)
            pmean = np.where(has_p > 0, np.bincount(it, weights=pv, minlength=n) / np.maximum(has_p, 1), np.nan)
            start = None
            for i in range(n + 1):
                on = i < n and pred_it[i]
                if on and start is None:
                    start = i
                if not on and start is not None:
                    ax.axvspan(start - 0.5, i - 0.5, color="tab:orange", alpha=0.15, lw=0)
                    start = None
            ax.plot(np.arange(n), tmean / 1e3, "o-", ms=2.5, lw=1, label="truth (simulated)", color="tab:blue")
            ax.plot(np.arange(n), pmean / 1e3, "x--", ms=3, lw=1, label="prediction", color="tab:orange")
            ax.plot([], [], color="tab:orange", alpha=0.3, lw=6, label="predicted span")
        else:
            ax.plot(np.arange(n), mean_dur / 1e3, "o-", ms=2.5, lw=1, label="simulated")
        ax.set_xlabel("iteration")
        ax.set_ylabel("iteration time, mean over ranks (µs)")
        ax.set_title(f"{job}: iteration time")
        ax.legend(loc="best", fontsize=8)
        p = _save(fig, out_dir / f"iterations-{job}.png")
        out.append(p)
    return out


def plot_ports(run_dir: Path, out_dir: Path) -> Path | None:
    from hybridsim_common.records import read_ports

    if not (run_dir / "ports.parquet").exists():
        return None
    plt = _plt()
    ps = read_ports(run_dir / "ports.parquet")
    if "util_pct" not in ps.features or ps.values.shape[0] == 0:
        return None
    util = ps.feature("util_pct")  # (S, P)
    fig, ax = plt.subplots(figsize=(9, 4.5))
    im = ax.imshow(util.T, aspect="auto", origin="lower", interpolation="nearest", cmap="viridis",
                   extent=(ps.t_end[0] / 1e6 - ps.interval / 1e6, ps.t_end[-1] / 1e6, 0, util.shape[1]),
                   vmin=0, vmax=max(100.0, float(util.max())))
    fig.colorbar(im, ax=ax, label="utilisation %")
    ax.set_xlabel("virtual time (ms)")
    ax.set_ylabel(f"router port id (router x {ps.radix} + port)")
    ax.set_title("port utilisation per sampling window")
    return _save(fig, out_dir / "port-utilisation.png")


def busy_over_time(start, end, size, arrival):
    """Step functions of a job stream: event times ``t``, terminals busy and jobs waiting on ``[t[i], t[i+1])``
    (jobs that never ended are left out). Sorted counts, so 10^5 jobs cost milliseconds: busy(t) = size started by
    t - size ended by t; waiting(t) = jobs arrived by t - jobs started by t."""
    start, end, size, arrival = (np.asarray(x, dtype=float) for x in (start, end, size, arrival))
    ok = np.isfinite(end)
    start, end, size, arrival = start[ok], end[ok], size[ok], arrival[ok]
    t = np.unique(np.concatenate([arrival, start, end]))
    by_start, by_end = np.argsort(start, kind="stable"), np.argsort(end, kind="stable")
    started = np.concatenate([[0.0], np.cumsum(size[by_start])])[np.searchsorted(start[by_start], t, "right")]
    ended = np.concatenate([[0.0], np.cumsum(size[by_end])])[np.searchsorted(end[by_end], t, "right")]
    waiting = np.searchsorted(np.sort(arrival), t, "right") - np.searchsorted(start[by_start], t, "right")
    return t, started - ended, waiting.astype(int)


#: how many jobs ``jobs-gantt.png``'s legend names (the rest: a count; every job is in ``jobs-schedule.png``)
GANTT_LEGEND_JOBS = 40
#: the most steps a utilisation or queue panel draws: beyond it, the time-weighted mean over equal bins
STEP_BINS = 600


def step_means(t, *values, bins: int = STEP_BINS):
    """Step functions (``values[k][i]`` holds on ``[t[i], t[i+1])``, the last value at ``t[-1]`` only) as drawable
    steps: unchanged when they have at most ``bins`` steps, else the exact time-weighted mean over ``bins`` equal bins
    of ``[t[0], t[-1]]`` (the integral of the step function over a bin / the bin's width), returned as the bin edges
    with each bin's mean (the last repeated at the end, for ``where="post"``). An instant (a drop to zero for a
    moment between two jobs) then weighs what it lasts instead of drawing a full-height spike."""
    t = np.asarray(t, dtype=float)
    values = [np.asarray(v, dtype=float) for v in values]
    if len(t) <= bins + 1 or t[-1] <= t[0]:
        return (t, *values)
    edges = np.linspace(t[0], t[-1], bins + 1)
    out = []
    for v in values:
        area = np.concatenate([[0.0], np.cumsum(v[:-1] * np.diff(t))])   # integral from t[0] to t[i]
        k = np.clip(np.searchsorted(t, edges, "right") - 1, 0, len(t) - 1)
        at = area[k] + v[k] * (edges - t[k])                               # integral from t[0] to each edge
        mean = np.diff(at) / np.diff(edges)
        out.append(np.append(mean, mean[-1]))
    return (edges, *out)


def plot_gantt(run_dir: Path, out_dir: Path) -> Path | None:
    """``jobs-gantt.png``: terminals x time, one colour per job, then utilisation and waiting jobs over time."""
    from matplotlib.collections import PolyCollection

    from hybridsim_common.records import read_jobs
    from hybridsim_common.rundir import load_json

    if not (run_dir / "jobs.parquet").exists():
        return None
    plt = _plt()
    t = read_jobs(run_dir / "jobs.parquet").to_pydict()
    summary = load_json(run_dir / "summary.json", "summary.json") if (run_dir / "summary.json").exists() else {}
    n_terms = summary.get("stream", {}).get("terminals") or 1 + max((max(x) for x in t["terminals"] if x), default=0)
    cmap = plt.get_cmap("tab20")
    polys, colours = [], []
    for k, (start, end, terms) in enumerate(zip(t["start"], t["end"], t["terminals"])):
        if not np.isfinite(end) or not terms:
            continue
        ids = np.sort(np.asarray(terms))
        cut = np.flatnonzero(np.diff(ids) != 1) + 1   # runs of consecutive terminal ids: one rectangle each
        for run in np.split(ids, cut):
            lo, hi = run[0], run[-1] + 1
            polys.append([(start / 1e6, lo), (end / 1e6, lo), (end / 1e6, hi), (start / 1e6, hi)])
            colours.append(cmap(k % 20))
    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(12, 6.5), sharex=True, gridspec_kw={"height_ratios": [3, 1]})
    ax.add_collection(PolyCollection(polys, facecolors=colours, edgecolors="none"))
    t_ev, busy, waiting = busy_over_time(t["start"], t["end"], t["size"], t["arrival"])
    x_max = float(t_ev.max()) / 1e6 if len(t_ev) else 1.0
    ax.set_xlim(0, x_max)
    ax.set_ylim(0, n_terms)
    ax.set_ylabel("terminal id")
    names = [str(x) for x in t["job"]]
    shown = min(len(names), GANTT_LEGEND_JOBS)
    cycle = "" if len(names) <= 20 else "; colours repeat every 20 jobs"
    ax.set_title(f"job stream: {len(names)} jobs on {n_terms} terminals (colour = job{cycle})")
    from matplotlib.patches import Patch

    handles = [Patch(color=cmap(k % 20), label=names[k]) for k in range(shown)]
    if len(names) > shown:
        handles.append(Patch(color="white", label=f"... {len(names) - shown} more (jobs-schedule.png)"))
    if handles:
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7, title="job",
                  title_fontsize=8, ncol=1 + (shown > 20))
    if len(t_ev):
        x, mean_busy, mean_wait = step_means(t_ev, busy, waiting)
        ax2.fill_between(x / 1e6, mean_busy / n_terms * 100, step="post", color="tab:blue", alpha=0.35, lw=0)
        ax2.step(x / 1e6, mean_busy / n_terms * 100, where="post", color="tab:blue", lw=1, label="utilisation %")
        ax2.set_ylim(0, 105)
        ax3 = ax2.twinx()
        ax3.step(x / 1e6, mean_wait, where="post", color="tab:red", lw=1, label="jobs waiting")
        ax3.set_ylabel("jobs waiting", color="tab:red")
    ax2.set_ylabel("utilisation %", color="tab:blue")
    ax2.set_xlabel("virtual time (ms)")
    return _save(fig, out_dir / "jobs-gantt.png")


def _stream_table(jobs) -> dict[str, np.ndarray]:
    """Columns of a jobs table (a path to a ``jobs.parquet`` of a run or of ``hybridsim schedule``, or a pyarrow
    table): name, size, arrival, start, end, killed (all False in a table without the column)."""
    import pyarrow.parquet as pq

    t = pq.read_table(jobs) if isinstance(jobs, (str, Path)) else jobs
    cols = t.column_names
    arrival = "submit" if "submit" in cols else "arrival"
    name = "name" if "name" in cols else "job"
    killed = (np.asarray(t.column("killed").to_pylist(), dtype=bool) if "killed" in cols
              else np.zeros(t.num_rows, dtype=bool))
    return {"name": np.array([str(x) for x in t.column(name).to_pylist()]),
            "size": t.column("size").to_numpy().astype(float), "killed": killed,
            **{k: t.column(c).to_numpy().astype(float) for k, c in (("arrival", arrival), ("start", "start"),
                                                                   ("end", "end"))}}


#: a scheduling Gantt chart labels each row with the job's name up to this many jobs (beyond: rows only)
LABELLED_ROWS = 150
#: the tallest scheduling Gantt chart (inches at 110 dpi; a whole trace's rows then share it, thinner than a pixel)
MAX_GANTT_HEIGHT = 40.0


def plot_gantt_chart(jobs, path: str | Path, *, nodes: int | None = None, first: int | None = None,
                     time_unit: tuple[str, float] = ("s", 1.0)) -> Path:
    """A scheduling Gantt chart of every job by arrival (or its ``first`` ones): one row per job, its wait (light)
    and its run (solid, colour = size class; hatched and labelled "killed" when it was killed at its walltime), an
    arrival marker, the job's name as a label (up to :data:`LABELLED_ROWS` jobs), a legend of the size classes.
    Rows are drawn as collections, so a whole trace (10^4-10^5 jobs) draws in seconds.
    ``jobs``: see :func:`_stream_table`; ``time_unit``: (name, units per time unit of the table), e.g. ("ms", 1e6)
    for a run's ns."""
    from matplotlib.collections import PolyCollection
    from matplotlib.patches import Patch

    from .scheduler import size_class

    plt = _plt()
    t = _stream_table(jobs)
    order = np.argsort(t["arrival"], kind="stable")[:first]
    unit, per = time_unit
    sizes = t["size"][order]
    cls = [size_class(s) for s in sizes]
    classes = sorted(set(cls), key=lambda c: int(c.split("-")[-1]))
    cmap = plt.get_cmap("viridis")
    colour = {c: cmap(i / max(1, len(classes) - 1)) for i, c in enumerate(classes)}
    n = len(order)
    labelled = n <= LABELLED_ROWS
    fig, ax = plt.subplots(figsize=(11, min(MAX_GANTT_HEIGHT, max(3.0, 0.16 * n + 1.2))))
    a, s_, e = t["arrival"][order] / per, t["start"][order] / per, t["end"][order] / per
    e = np.where(np.isfinite(e), e, s_)
    killed = t["killed"][order]
    rows = np.arange(n, dtype=float)
    h = 0.3 if n <= 2000 else 0.5

    def boxes(x0, x1, sel):
        return [[(x0[i], rows[i] - h), (x1[i], rows[i] - h), (x1[i], rows[i] + h), (x0[i], rows[i] + h)]
                for i in np.flatnonzero(sel)]

    ax.add_collection(PolyCollection(boxes(a, s_, s_ > a), facecolors="0.85", edgecolors="none"))
    ax.add_collection(PolyCollection(boxes(s_, e, np.ones(n, bool)), facecolors=[colour[c] for c in cls],
                                     edgecolors="none"))
    if killed.any():
        ax.add_collection(PolyCollection(boxes(s_, e, killed), facecolors="none", edgecolors="black", hatch="//",
                                         lw=0.5))
    if labelled:
        for row, i in enumerate(order.tolist()):
            k = bool(t["killed"][i])
            ax.text(e[row], row, f" {t['name'][i]} ({int(t['size'][i])}){' killed' if k else ''}", va="center",
                    fontsize=6)
    if labelled:  # a whole trace's arrival marks would cover its rows: the wait bars start at the arrivals
        ax.plot(a, rows, "|", color="black", ms=7, label="arrival")
    lo = float(np.min(a)) if n else 0.0
    hi = float(np.max(e)) if n else 1.0
    ax.set_xlim(lo, hi + (hi - lo) * (0.12 if labelled else 0.01) + 1e-12)
    ax.set_ylim(n - 0.5, -0.5)
    ax.set_yticks([])
    ax.set_xlabel(f"time ({unit})")
    ax.set_ylabel("jobs, by arrival" + ("" if labelled else f" (one row each; labels up to {LABELLED_ROWS} jobs)"))
    more = f" (first {n} of {len(t['name'])} by arrival)" if len(t["name"]) > n else ""
    ax.set_title(f"schedule: {n} jobs{more}" + (f" on {nodes} nodes" if nodes else "")
                 + ("; label: name (size)" if labelled else ""))
    handles = [Patch(color=colour[c], label=f"run, {c} nodes") for c in classes]
    handles += [Patch(color="0.85", label="waiting")] + ax.lines[-1:]
    if killed.any():
        handles.append(Patch(facecolor="white", edgecolor="black", hatch="//", label="killed at its walltime"))
    ax.legend(handles=handles, loc="upper right", fontsize=7)  # jobs run down and to the right
    return _save(fig, Path(path))


def plot_queue_over_time(jobs, path: str | Path, *, nodes: int, time_unit: tuple[str, float] = ("h", 3600.0)
                         ) -> Path:
    """Utilisation (% of ``nodes`` busy) and queue length (jobs arrived, not started) over the whole stream, as
    step functions (:func:`busy_over_time`)."""
    plt = _plt()
    t = _stream_table(jobs)
    ev, busy, waiting = busy_over_time(t["start"], t["end"], t["size"], t["arrival"])
    unit, per = time_unit
    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(11, 5.5), sharex=True)
    x, mb, mw = step_means(ev, busy, waiting)
    binned = len(x) < len(ev)
    ax.fill_between(x / per, 100 * mb / nodes, step="post", color="tab:blue", alpha=0.35, lw=0)
    ax.step(x / per, 100 * mb / nodes, where="post", color="tab:blue", lw=0.8)
    ax.set_ylim(0, 105)
    ax.set_ylabel("utilisation %")
    mean = float(np.sum(busy[:-1] * np.diff(ev)) / (nodes * (ev[-1] - ev[0]))) if len(ev) > 1 else 0.0
    ax.set_title(f"{len(t['name'])} jobs on {nodes} nodes: utilisation (mean {100 * mean:.1f} %) and queue length"
                 + (f" (time-weighted means over {len(x) - 1} bins)" if binned else ""))
    ax2.step(x / per, mw, where="post", color="tab:red", lw=0.8)
    ax2.set_ylabel("jobs waiting")
    ax2.set_xlabel(f"time ({unit})")
    return _save(fig, Path(path))


def plot_stream_schedule(run_dir: Path, out_dir: Path) -> list[Path]:
    """A stream run's ``jobs-schedule.png`` (:func:`plot_gantt_chart`) and ``jobs-queue.png``
    (:func:`plot_queue_over_time`), in us or ms of virtual time; nothing for a run without ``jobs.parquet``."""
    from hybridsim_common.records import read_jobs
    from hybridsim_common.rundir import load_json

    if not (run_dir / "jobs.parquet").exists():
        return []
    table = read_jobs(run_dir / "jobs.parquet")
    summary = load_json(run_dir / "summary.json", "summary.json") if (run_dir / "summary.json").exists() else {}
    terms = table.column("terminals").to_pylist()
    nodes = summary.get("stream", {}).get("terminals") or 1 + max((max(x) for x in terms if x), default=0)
    ends = [e for e in table.column("end").to_pylist() if np.isfinite(e)]
    unit = ("ms", 1e6) if ends and max(ends) >= 1e6 else ("us", 1e3)
    return [plot_gantt_chart(table, out_dir / "jobs-schedule.png", nodes=nodes, time_unit=unit),
            plot_queue_over_time(table, out_dir / "jobs-queue.png", nodes=nodes, time_unit=unit)]


def plot_bench(result: dict, out_dir: Path) -> Path:
    plt = _plt()
    runs = result["runs"]
    names = [r["run"] for r in runs]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 3.8))
    a1.bar(names, [r["speedup"] for r in runs], color="tab:green")
    a1.bar(names, [r["theoretical_speedup"] for r in runs], color="none", edgecolor="k", ls="--",
           label="theoretical (event ratio)")
    a1.set_ylabel("speedup vs pure simulation")
    a1.legend(fontsize=8)
    jobs = sorted({j for r in runs for j in r["jobs"]})
    w = 0.8 / max(len(jobs), 1)
    for k, j in enumerate(jobs):
        a2.bar(np.arange(len(runs)) + k * w, [r["jobs"].get(j, {}).get("completion_error_pct") or 0 for r in runs],
               width=w, label=j)
    a2.axhline(2.0, color="r", ls=":", lw=1, label="2 % target")
    a2.set_xticks(np.arange(len(runs)) + w * (len(jobs) - 1) / 2, names)
    a2.set_ylabel("completion-time error %")
    a2.legend(fontsize=8)
    for ax in (a1, a2):
        ax.tick_params(axis="x", rotation=30, labelsize=8)
    return _save(fig, out_dir / "bench-policies.png")


def plot_tradeoff(runs: list[dict], path: Path) -> Path:
    """Speedup (wall clock, and the event ratio dashed) against the largest per-job completion error, one point per
    Ft of one policy."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 4))
    runs = sorted(runs, key=lambda r: r["params"]["ft"])
    xs = [r["max_completion_error_pct"] or 0 for r in runs]
    ys = [r["speedup"] for r in runs]
    ax.plot(xs, ys, "o-", label="wall-clock speedup")
    th = [r.get("theoretical_speedup") for r in runs]
    if all(isinstance(t, (int, float)) for t in th):
        ax.plot(xs, th, "s--", alpha=0.6, label="theoretical (event ratio)")
    for r, x, y in zip(runs, xs, ys):
        ax.annotate(f"Ft={r['params']['ft']}", (x, y), textcoords="offset points", xytext=(4, 4), fontsize=8)
    ax.set_xlabel("max per-job completion-time error %")
    ax.set_ylabel("speedup")
    policy = runs[0].get("policy") or "periodic" if runs else "periodic"
    ax.set_title(f"speedup-error trade-off over Ft ({policy} policy)")
    ax.legend(fontsize=8)
    return _save(fig, path)


def curves(result: dict) -> dict[str, list[dict]]:
    """Per surrogate, the points of its sweep (``run["sweep"]``: an Ft, then ``"zero-shot"``; any other run of a policy
    with an ``ft`` is a point too), Ft ascending, zero-shot last, each the mean over the bench's seeds of the event
    speedup, wall speedup, worst-job completion error and job iteration MAPE (``n``: seeds)."""
    keys = ("theoretical_speedup", "speedup", "max_completion_error_pct", "job_iteration_mape_pct")
    groups: dict[str, dict] = {}
    for r in result.get("runs", []):
        point = r.get("sweep")
        if point is None and r.get("policy") in SWEEPABLE and "ft" in (r.get("params") or {}):
            point = r["params"]["ft"]  # the policy's own run is a point of its curve too
        if point is None:
            continue
        groups.setdefault(str(r.get("surrogate_spec")), {}).setdefault(str(point), []).append(r)
    out = {}
    for spec, by_point in groups.items():
        pts = []
        order = sorted(by_point, key=lambda k: (not k.isdigit(), int(k) if k.isdigit() else 0))
        for point in order:
            rs = by_point[point]
            row = {"sweep": point, "n": len(rs)}
            for k in keys:
                vals = [r.get(k) for r in rs if isinstance(r.get(k), (int, float))]
                row[k] = float(np.mean(vals)) if vals else None
            pts.append(row)
        out[spec] = pts
    return out


def format_curves(result: dict) -> str:
    """:func:`curves` as a table."""
    cs = curves(result)
    if not cs:
        return ""

    def f(x, fmt):
        return format(x, fmt) if isinstance(x, (int, float)) else "-"

    head = f"{'surrogate':<24} {'point':<10} {'seeds':>5} {'events x':>9} {'wall x':>8} {'maxErr%':>8} {'jobMAPE%':>9}"
    lines = [head, "-" * len(head)]
    for spec, pts in cs.items():
        for p in pts:
            point = p["sweep"] if not p["sweep"].isdigit() else f"Ft={p['sweep']}"
            lines.append(f"{spec[:24]:<24} {point:<10} {p['n']:>5} {f(p['theoretical_speedup'], '9.2f')} "
                         f"{f(p['speedup'], '8.2f')} {f(p['max_completion_error_pct'], '8.2f')} "
                         f"{f(p['job_iteration_mape_pct'], '9.2f')}")
    return "\n".join(lines)


def plot_curves(result: dict, path: Path) -> Path | None:
    """Worst-job completion error against the event speedup, one line a surrogate (:func:`curves`)."""
    cs = curves(result)
    if not cs:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for spec, pts in cs.items():
        pts = [p for p in pts if p["theoretical_speedup"] is not None and p["max_completion_error_pct"] is not None]
        if not pts:
            continue
        xs = [p["theoretical_speedup"] for p in pts]
        ys = [p["max_completion_error_pct"] for p in pts]
        line, = ax.plot(xs, ys, "o-", label=spec)
        for p, x, y in zip(pts, xs, ys):
            ax.annotate("0" if not p["sweep"].isdigit() else p["sweep"], (x, y), textcoords="offset points",
                        xytext=(3, 3), fontsize=7, color=line.get_color())
    ax.set_xscale("log")
    ax.set_xlabel("event speedup (pure events / hybrid events)")
    ax.set_ylabel("worst-job completion error %")
    ax.set_title("error against speedup (labels: Ft; 0: zero-shot)")
    ax.legend(fontsize=8)
    return _save(fig, path)


def status_warnings(path: str | Path) -> list[str]:
    """One line for each manifest of the run (or of the bench and its runs) at ``path`` whose status is not
    ``completed``: plots of a run that is still going, was killed or failed show only part of it."""
    from hybridsim_common.rundir import MANIFEST, RunDirError, read_manifest

    path = Path(path)
    if not path.is_dir():
        return []
    out = []
    for d in [path, *sorted(p for p in path.iterdir() if p.is_dir() and not p.name.startswith("."))]:
        if not (d / MANIFEST).is_file():
            continue
        try:
            man = read_manifest(d)
        except RunDirError as exc:
            out.append(str(exc))
            continue
        status = man.get("status") if isinstance(man, dict) else None
        if status == "completed":
            continue
        reason = f" ({man['reason']})" if man.get("reason") else ""
        what = ("the run has not finished, or was killed before it could say so" if status == "running"
                else "the plots show only what it wrote")
        out.append(f"{d}: manifest status is {status!r}{reason}; {what}")
    return out


#: the files of a run or bench directory the report reads
READS = ("manifest.json", "summary.json", "bench.json", "iterations.parquet", "ports.parquet", "jobs.parquet")


def _check_files(d: Path) -> None:
    """Refuse (:class:`~hybridsim_common.rundir.RunDirError`) a file the report would read that is not a regular
    file (a FIFO would block the read, a device never ends)."""
    from hybridsim_common.files import check_regular
    from hybridsim_common.rundir import RunDirError

    for name in READS:
        p = d / name
        if p.exists():
            try:
                check_regular(p)
            except OSError as exc:
                raise RunDirError(f"{p}: {exc.strerror}: not a file hybridsim wrote") from None


def report(path: str | Path, out: str | Path | None = None) -> list[Path]:
    """The report's files (module docstring) of the run or bench directory ``path``, into ``out`` (default
    ``path/report``). A directory whose files are broken, half-written or not regular files raises
    :class:`~hybridsim_common.rundir.RunDirError` naming the directory and what is wrong."""
    from hybridsim_common.rundir import RunDirError

    path = Path(path)
    try:
        return _report(path, out)
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:  # pyarrow's ArrowInvalid is one
        raise RunDirError(f"{path}: a broken or half-written run or bench directory ({type(exc).__name__}: "
                          f"{str(exc)[:300]}); nothing to plot from it") from None


def _report(path: Path, out: str | Path | None) -> list[Path]:
    from hybridsim_common.rundir import load_json

    out_dir = Path(out) if out else path / "report"
    is_bench = (path / "bench.json").exists()
    if not is_bench and not (path / "iterations.parquet").exists():
        raise FileNotFoundError(f"{path}: no iterations.parquet or bench.json (not a run or bench directory)")
    _check_files(path)
    if out:
        out_dir.mkdir(parents=True, exist_ok=True)  # a folder the user named, wherever it leads
    else:
        _own_dir(out_dir)
    made: list[Path] = []
    if is_bench:
        result = load_json(path / "bench.json", "bench.json")
        made.append(plot_bench(result, out_dir))
        groups: dict[str, list] = {}
        for r in result["runs"]:
            if r.get("policy") in SWEEPABLE and "ft" in r.get("params", {}):
                groups.setdefault((r["policy"], r.get("surrogate_spec")), []).append(r)
        sweep = max(groups.values(), key=len, default=[])
        if len(sweep) > 1:
            made.append(plot_tradeoff(sweep, out_dir / "tradeoff-ft.png"))
        table = format_curves(result)
        if table:
            (out_dir / "curves.txt").write_text(table + "\n")
            made += [out_dir / "curves.txt", plot_curves(result, out_dir / "curves.png")]
        pures = bench_pure_dirs(path, result)
        pages = []
        for sub in sorted(p for p in path.iterdir() if not p.name.startswith(".")
                          and (p / "iterations.parquet").exists()):
            _check_files(sub)
            sub_out = _own_dir(out_dir / sub.name)
            pure = pures.get(sub.name)
            made += plot_iterations(sub, sub_out, pure_dir=pure if pure != sub else None)
            pages.append((sub.name, write_run_index(sub, sub_out, pure_dir=pure if pure != sub else None,
                                                    up=out_dir / "index.html")))
        made += [p for _, p in pages]
        made.append(write_bench_index(path, out_dir, result, pages))
        return made
    made += plot_iterations(path, out_dir)
    for p in (plot_ports(path, out_dir), plot_gantt(path, out_dir)):
        if p:
            made.append(p)
    made += plot_stream_schedule(path, out_dir)
    summary = path / "summary.json"
    if summary.exists():
        energy = load_json(summary, "summary.json").get("energy")
        if energy:
            from .energy.energy import format_energy_table

            p = out_dir / "energy.txt"
            tmp = out_dir / ".energy.txt.partial"
            tmp.write_text(format_energy_table(energy) + "\n")
            os.replace(tmp, p)  # a link at energy.txt is replaced, not followed
            made.append(p)
    made.append(write_run_index(path, out_dir))
    return made


def bench_pure_dirs(bench_dir: Path, result: dict) -> dict[str, Path]:
    """Run name -> the pure run it was judged against (``bench.json``'s ``pures`` by seed; ``pure`` else): a folder
    of the bench, or the one ``--pure`` named."""
    pures = result.get("pures") or {}
    out = {}
    for r in result.get("runs", []):
        info = pures.get(str(r.get("seed"))) or result.get("pure") or {}
        if info.get("run"):
            out[r["run"]] = bench_dir / info["run"]  # an absolute path (--pure) stays itself
    return out
