"""``index.html`` of a report: one page per run and per bench that shows every plot and links every table, so a person
opens one file (``hybridsim report DIR`` writes ``DIR/report/index.html``).

A run's page: its key figures (``summary.json``: wall and CPU time, events, each job's completion time; a hybrid
run's predicted share), every PNG of the report folder, and links to the text tables of the report and to the run's
own files (summary, manifest, description, the Parquet tables). A bench's page: the narrow bench table
(:mod:`hybridsim.bench_table`) with its summary lines, every PNG of the report folder and of the bench directory,
links to ``bench.json`` and the text tables, and one line per run linking its own page (``report/<run>/index.html``,
written the same way). Every link is relative, so the folders can be moved or served as they are; the pages load
nothing from outside them.
"""

from __future__ import annotations

import html
import json
import os
from pathlib import Path

#: a run's files the page links when they exist
RUN_FILES = ("summary.json", "manifest.json", "description.json", "scenario.yaml", "iterations.parquet",
             "jobs.parquet", "ports.parquet")

#: the bench page's second table: where each hybrid run's wall time went (bench.json keys, formats)
SPLIT = (("theoretical_speedup", ".2f"), ("wall_pure_s", ".2f"), ("wall_hybrid_s", ".2f"), ("simulation_s", ".2f"),
         ("controller_s", ".2f"), ("inference_s", ".2f"), ("tuning_s", ".2f"))
SPLIT_HEAD = ("events skipped (x)", "pure wall s", "hybrid wall s", "simulation s", "controller s", "inference s",
              "tuning s")

STYLE = ("body{font-family:sans-serif;max-width:1200px;margin:1em auto;padding:0 1em}"
         "img{max-width:100%;border:1px solid #ccc}figure{margin:1em 0}table{border-collapse:collapse}"
         "td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}td:first-child,th:first-child{text-align:left}"
         "code{background:#f4f4f4}")


def _rel(target: Path, page_dir: Path) -> str:
    return Path(os.path.relpath(target, page_dir)).as_posix()


def _num(x, fmt: str) -> str:
    return format(x, fmt) if isinstance(x, (int, float)) and not isinstance(x, bool) and x == x else "-"


def _page(title: str, body: list[str]) -> str:
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{html.escape(title)}</title><style>{STYLE}</style></head><body>\n"
            + "\n".join(body) + "\n</body></html>\n")


def _figures(images: list[Path], page_dir: Path) -> list[str]:
    out = ["<h2>Plots</h2>"] if images else []
    for p in images:
        src = html.escape(_rel(p, page_dir))
        out.append(f'<figure><a href="{src}"><img src="{src}" alt="{html.escape(p.name)}"></a>'
                   f"<figcaption>{html.escape(p.name)}</figcaption></figure>")
    return out


def _links(title: str, files: list[Path], page_dir: Path) -> list[str]:
    if not files:
        return []
    items = "".join(f'<li><a href="{html.escape(_rel(f, page_dir))}">{html.escape(f.name)}</a></li>' for f in files)
    return [f"<h2>{html.escape(title)}</h2><ul>{items}</ul>"]


def _write(page_dir: Path, text: str) -> Path:
    path = page_dir / "index.html"
    tmp = page_dir / ".index.html.partial"
    tmp.write_text(text)
    os.replace(tmp, path)  # a link at index.html is replaced, not followed
    return path


def run_figures(run_dir: Path) -> list[tuple[str, str]]:
    """(label, value) of a run's key figures from its ``summary.json`` (empty without one)."""
    try:
        s = json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError):
        return []
    rows = [("wall time", f"{_num(s.get('wall_s'), '.2f')} s"), ("CPU time", f"{_num(s.get('cpu_s'), '.2f')} s"),
            ("events", _num(s.get("events"), ",d"))]
    hyb = s.get("hybrid") or {}
    if hyb:
        rows.append(("policy / surrogate", f"{hyb.get('policy')} / {hyb.get('surrogate')}"))
        rows.append(("iterations predicted", _num(hyb.get("surrogate_fraction"), ".0%")))
    for name, j in (s.get("jobs") or {}).items():
        if isinstance(j, dict) and j.get("completion_time_ns") is not None:
            rows.append((f"job {name}: completion", f"{_num(j['completion_time_ns'] / 1e6, '.4f')} ms"))
    if s.get("stream"):
        rows.append(("job stream: makespan", f"{_num(s['stream'].get('makespan', 0) / 1e6, '.4f')} ms"))
    return rows


def _figure_table(rows: list[tuple[str, str]]) -> list[str]:
    if not rows:
        return []
    body = "".join(f"<tr><td>{html.escape(k)}</td><td>{html.escape(v)}</td></tr>" for k, v in rows)
    return [f"<h2>Figures</h2><table>{body}</table>"]


def write_run_index(run_dir: Path, page_dir: Path, *, title: str | None = None, pure_dir: Path | None = None,
                    up: Path | None = None) -> Path:
    """``page_dir/index.html`` for the run at ``run_dir``: its figures, every PNG and text table in ``page_dir``,
    its files; ``pure_dir``: the pure run it was judged against (linked); ``up``: the page above (a bench's)."""
    run_dir, page_dir = Path(run_dir), Path(page_dir)
    body = [f"<h1>{html.escape(title or run_dir.name)}</h1>"]
    if up is not None:
        body.append(f'<p><a href="{html.escape(_rel(up, page_dir))}">back to the bench</a></p>')
    body += _figure_table(run_figures(run_dir))
    if pure_dir is not None and (Path(pure_dir) / "summary.json").exists():
        body.append(f'<p>Judged against the pure run <a href="{html.escape(_rel(Path(pure_dir) / "summary.json", page_dir))}">'
                    f"{html.escape(Path(pure_dir).name)}</a>; the iteration plots draw it in grey.</p>")
    body += _figures(sorted(page_dir.glob("*.png")), page_dir)
    body += _links("Tables", sorted(page_dir.glob("*.txt")), page_dir)
    body += _links("Run files", [run_dir / f for f in RUN_FILES if (run_dir / f).is_file()], page_dir)
    return _write(page_dir, _page(title or run_dir.name, body))


def write_bench_index(bench_dir: Path, page_dir: Path, result: dict, run_pages: list[tuple[str, Path]]) -> Path:
    """``page_dir/index.html`` for the bench at ``bench_dir``: the narrow table and its summary lines, every PNG of
    the report folder and of the bench directory, ``bench.json`` and the text tables, and a link per run page."""
    from .bench_table import COLUMNS, LEGEND, SUMMARY_LINES

    bench_dir, page_dir = Path(bench_dir), Path(page_dir)
    body = [f"<h1>bench: {html.escape(str(result.get('scenario', bench_dir.name)))}</h1>"]
    head = "".join(f"<th>{html.escape(h)}</th>" for h, *_ in COLUMNS)
    pages = dict(run_pages)
    rows = []
    for r in result.get("runs", []):
        name = html.escape(r["run"])
        cell = f'<a href="{html.escape(_rel(pages[r["run"]], page_dir))}">{name}</a>' if r["run"] in pages else name
        vals = "".join(f"<td>{html.escape(_num(r.get(key), fmt) + (unit if _num(r.get(key), fmt) != '-' else ''))}"
                       f"</td>" for _h, key, fmt, unit in COLUMNS)
        rows.append(f"<tr><td>{cell}</td>{vals}</tr>")
    body.append(f"<h2>Runs</h2><table><tr><th>run</th>{head}</tr>{''.join(rows)}</table>"
                f"<p>{html.escape(LEGEND)}</p>")
    split = "".join(f"<tr><td>{html.escape(r['run'])}</td>"
                    + "".join(f"<td>{html.escape(_num(r.get(k), fmt))}</td>" for k, fmt in SPLIT)
                    + "</tr>" for r in result.get("runs", []))
    body.append("<h2>Where the time went</h2><table><tr><th>run</th>"
                + "".join(f"<th>{html.escape(h)}</th>" for h in SPLIT_HEAD) + f"</tr>{split}</table>"
                "<p>events skipped: pure events / hybrid events, the speedup the wall clock would show if the hybrid "
                "loop cost nothing; the hybrid run's wall seconds split into simulation, controller, inference and "
                "tuning.</p>")
    summary = [s for fn in SUMMARY_LINES for s in fn(result)]
    if summary:
        body.append("<ul>" + "".join(f"<li>{html.escape(s)}</li>" for s in summary) + "</ul>")
    others = [(label, p) for label, p in run_pages if label not in {r["run"] for r in result.get("runs", [])}]
    if others:
        body.append("<p>Also: " + ", ".join(f'<a href="{html.escape(_rel(p, page_dir))}">{html.escape(label)}</a>'
                                            for label, p in others) + "</p>")
    own = sorted(page_dir.glob("*.png"))
    body += _figures(own + [p for p in sorted(bench_dir.glob("*.png")) if p.name not in {q.name for q in own}],
                     page_dir)
    body += _links("Tables", [bench_dir / "bench.json"] + sorted(page_dir.glob("*.txt")), page_dir)
    return _write(page_dir, _page(f"bench {result.get('scenario', '')}", body))
