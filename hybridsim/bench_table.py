"""``hybridsim bench``'s printed tables: a narrow default a person reads (at most :data:`WIDTH` columns, full words,
one line of legend, summary lines under it) and the wide one with every figure (``--wide``). The figures are the
ones :mod:`hybridsim.bench` computes (its module docstring defines them) and ``bench.json`` keeps all of them.

Summary lines: :data:`SUMMARY_LINES` is the list of functions ``result -> list[str]`` whose lines are printed under
the narrow table (the best run, why a hybrid run is slower than pure, job streams, the paired comparisons'
pointer); a new run-level figure adds its function there, not a column.
"""

from __future__ import annotations

import math

import numpy as np

#: the narrow table's width limit (columns)
WIDTH = 120
#: width of the run-name column of the narrow table (longer names are shortened in the middle; bench.json has them)
RUN_WIDTH = 38

#: (header, bench.json key, format, unit suffix) of the narrow table's columns after the run name
COLUMNS = (
    ("speedup", "speedup", ".2f", ""),
    ("CPU speedup", "cpu_speedup", ".2f", ""),
    ("predicted", "surrogate_fraction", ".0%", ""),
    ("worst error", "max_completion_error_pct", ".2f", " %"),
    ("mean error", "mean_completion_error_pct", ".2f", " %"),
    ("over 5 %", "jobs_above_5pct", "d", ""),
    ("job MAPE", "job_iteration_mape_pct", ".2f", " %"),
)
#: the one line of legend under the narrow table's header
LEGEND = ("speedup: pure/hybrid wall (CPU: CPU time); predicted: share of iterations; errors: job completion vs "
          "pure")


def _num(x, fmt: str) -> str:
    return format(x, fmt) if isinstance(x, (int, float)) and x is not None and math.isfinite(x) else "-"


def _short(name: str, width: int) -> str:
    return name if len(name) <= width else name[:width // 2 - 1] + ".." + name[-(width - width // 2 - 1):]


def format_narrow(result: dict) -> str:
    """One row a run: speedups, predicted share, worst and mean job completion error, jobs above 5 %, job MAPE;
    a legend line; then the :data:`SUMMARY_LINES`."""
    widths = [max(len(h), 8) for h, *_ in COLUMNS]
    head = f"{'run':<{RUN_WIDTH}}" + "".join(f" {h:>{w}}" for (h, *_), w in zip(COLUMNS, widths))
    lines = [head, LEGEND, "-" * len(head)]
    for r in result["runs"]:
        cells = [f"{_num(r.get(key), fmt)}{unit if _num(r.get(key), fmt) != '-' else ''}"
                 for _h, key, fmt, unit in COLUMNS]
        lines.append(f"{_short(r['run'], RUN_WIDTH):<{RUN_WIDTH}}" + "".join(f" {c:>{w}}" for c, w in
                                                                              zip(cells, widths)))
    summary = [s for fn in SUMMARY_LINES for s in fn(result)]
    return "\n".join(lines + ([""] + summary if summary else []))


def best_run(result: dict) -> list[str]:
    """The fastest run whose worst job error is at most 5 %, if any."""
    ok = [r for r in result["runs"] if (r.get("max_completion_error_pct") or 0) <= 5.0
          and isinstance(r.get("speedup"), (int, float))]
    if not ok:
        return []
    r = max(ok, key=lambda r: r["speedup"])
    return [f"fastest run within 5 % on every job: {r['run']} (speedup {_num(r['speedup'], '.2f')}, worst error "
            f"{_num(r.get('max_completion_error_pct'), '.2f')} %)"]


def why_slower(result: dict) -> list[str]:
    """For each hybrid run slower than pure: where its wall time went."""
    out = []
    for r in result["runs"]:
        if isinstance(r.get("speedup"), (int, float)) and r["speedup"] < 1.0:
            theo = r.get("theoretical_speedup")
            out.append(f"{r['run']}: slower than pure: {_num(r.get('controller_pct'), '.0f')} % of its wall in the "
                       f"controller, {_num(r.get('overhead_pct'), '.0f')} % in inference and tuning; it skipped "
                       f"{_num((1 - 1 / theo) * 100 if theo else None, '.0f')} % of the events")
    return out


def stream_lines(result: dict) -> list[str]:
    """Job streams: makespan and run-time errors per run."""
    return [f"{r['run']}: job stream: makespan error {_num(r['makespan_error_pct'], '.2f')} % "
            f"({_num(r['makespan_pure_ns'] / 1e6, '.3f')} ms pure), run-time error mean "
            f"{_num(r['mean_run_time_error_pct'], '.2f')} % max {_num(r['max_run_time_error_pct'], '.2f')} %, "
            f"{r['jobs_run_time_above_5pct']} jobs above 5 %"
            for r in result["runs"] if "makespan_error_pct" in r]


def coverage_lines(result: dict) -> list[str]:
    """Each run's coverage of the error target (``bench.coverage``: the share of jobs within ``target_error``) and,
    where the default controller ran the truth instead of predicting, why."""
    out = []
    for r in result["runs"]:
        if r.get("coverage_jobs"):
            promise = (f" (the policy promises {r['coverage_promised']:.0%})"
                       if r.get("coverage_promised") is not None else "")
            out.append(f"{r['run']}: coverage: {r['coverage_within']} of {r['coverage_jobs']} jobs within "
                       f"{r['coverage_target_pct']:g} %{promise}")
        if r.get("runs_truth"):
            out.append(f"{r['run']}: ran the truth (the default controller): {r['runs_truth']}")
    return out


def paired_pointer(result: dict) -> list[str]:
    return ([f"paired over seeds {result.get('seeds')}: {len(result['paired'])} comparisons (--wide; bench.json "
             f"'paired')"] if result.get("paired") else [])


#: functions ``result -> list[str]`` printed, in order, under the narrow table (module docstring)
def floor_lines(result: dict) -> list[str]:
    """On a backend that runs the policy itself (CODES' director): each job's signed completion error beside its
    perturbation floor (the hybrid machinery with nothing predicted), which an error must be read against."""
    out = []
    for r in result["runs"]:
        floor = r.get("perturbation_floor_pct")
        if not floor:
            continue
        parts = [f"{name} {_num(j.get('completion_error_signed_pct'), '+.2f')} % (floor {_num(floor.get(name), '+.2f')} %)"
                 for name, j in r["jobs"].items() if name in floor]
        out.append(f"{r['run']}: completion error " + ", ".join(parts))
    return out


SUMMARY_LINES = [coverage_lines, floor_lines, best_run, why_slower, stream_lines, paired_pointer]


def format_paired(result: dict) -> str:
    """The ``paired`` section as a table."""
    rows = result.get("paired") or []
    if not rows:
        return ""
    width = max(len(r["case"]) for r in rows)
    head = (f"{'case':<{width}} {'surrogate':<22} {'vs':<8} {'metric':<28} {'n':>3} {'mean diff':>10} "
            f"{'95 % interval':>20}")
    lines = [f"paired over seeds {result.get('seeds')} (surrogate - baseline, points; negative: lower error)", head,
             "-" * len(head)]
    for r in rows:
        ci = f"[{r['ci95'][0]:+.2f}, {r['ci95'][1]:+.2f}]" if r["ci95"] else "-"
        lines.append(f"{r['case']:<{width}} {str(r['surrogate'])[:22]:<22} {r['baseline']:<8} {r['metric']:<28} "
                     f"{r['n']:>3} {r['mean_diff']:>+10.2f} {ci:>20}")
    return "\n".join(lines)


def format_wide(result: dict) -> str:
    """Every figure: one row a run, job-level errors first (hybridsim.bench's docstring), per-rank MAPE last; the
    job streams' lines; one line a job and run; the paired comparisons."""
    head = (f"{'run':<44} {'speedup':>8} {'theor.':>8} {'eff.':>6} {'f':>6} {'jobMAPE%':>9} {'maxErr%':>8} "
            f"{'meanErr%':>9} {'>5%':>4} {'truthBias%':>10} {'ctl s':>7} {'inf s':>7} {'tune s':>7} {'rankMAPE%':>10}")
    lines = [head, "-" * len(head)]
    f = _num
    for r in result["runs"]:
        lines.append(f"{r['run']:<44} {f(r['speedup'], '8.2f')} {f(r['theoretical_speedup'], '8.2f')} "
                     f"{f(r['efficiency'], '6.2f')} {f(r['surrogate_fraction'], '6.2f')} "
                     f"{f(r.get('job_iteration_mape_pct'), '9.2f')} {f(r['max_completion_error_pct'], '8.2f')} "
                     f"{f(r.get('mean_completion_error_pct'), '9.2f')} "
                     f"{r['jobs_above_5pct']:>4} {f(r.get('worst_truth_bias_pct'), '+10.2f')} "
                     f"{f(r.get('controller_s'), '7.2f')} {f(r['inference_s'], '7.2f')} "
                     f"{f(r['tuning_s'], '7.2f')} {f(r['iteration_mape_pct'], '10.2f')}")
    lines += stream_lines(result) + coverage_lines(result)
    lines.append("")
    for r in result["runs"]:
        for name, j in r["jobs"].items():
            rt = (f"  run-time error {f(j.get('run_time_error_signed_pct'), '+.2f')} %"
                  if "run_time_error_pct" in j else "")
            ranks = j.get("rank_iteration_mape_pct") or {}
            worst = max(ranks, key=ranks.get) if ranks else None
            per_rank = (f"  rank MAPE median {f(float(np.median(list(ranks.values()))), '.2f')} % "
                        f"max {f(ranks[worst], '.2f')} % (rank {worst})") if ranks else ""
            fl = (r.get("perturbation_floor_pct") or {}).get(name)
            floor = f" (floor {f(fl, '+.2f')} %)" if "perturbation_floor_pct" in r else ""
            lines.append(f"  {r['run']:<42} {name:<12} completion error "
                         f"{f(j.get('completion_error_signed_pct'), '+.2f')} %{floor}  "
                         f"job iteration MAPE {f(j.get('job_iteration_mape_pct'), '.2f')} %  "
                         f"f {f(j['surrogate_fraction'], '.2f')}{rt}  truth bias "
                         f"{f(j.get('truth_bias_pct'), '+.2f')} %  (per rank: MAPE "
                         f"{f(j['iteration_mape_pct'], '.2f')} %{per_rank})")
    text = "\n".join(lines)
    return text + ("\n\n" + format_paired(result) if result.get("paired") else "")


def format_table(result: dict, wide: bool = False) -> str:
    """The bench as text: :func:`format_narrow` (the default), or :func:`format_wide` with ``wide``."""
    return format_wide(result) if wide else format_narrow(result)
