"""`hybridsim report`'s pages and plots a person reads: index.html per run and per bench (opened in headless Chromium:
no broken image, no missing link), the Gantt legend and every job, utilisation as time-weighted steps, the pure run
drawn beside a bench's hybrid iterations."""

import json
import re
import shutil
import subprocess
import urllib.parse
from pathlib import Path

import numpy as np
import pytest

import hybridsim.report as rep
from hybridsim.bench import run_bench
from hybridsim.cli import main
from hybridsim.scenario import parse_scenario

from fakes import FakeBackend

SC = """
topology: {groups: 9, routers_per_group: 4, terminals_per_router: 2, global_channels_per_router: 2}
jobs:
  - {name: a, ranks: 4, iterations: 24, workload: {kind: allreduce}}
  - {name: b, ranks: 3, iterations: 24, workload: {kind: allreduce}}
surrogate: {model: last}
controller: {policy: surrogate, params: {warmup: 6}, sync: rank}
"""


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench") / "b"
    res = run_bench(parse_scenario(SC), out, sweep_ft=[4, 8], backend_factory=lambda s: FakeBackend(s))
    made = rep.report(out)
    return out, res, made


@pytest.fixture(scope="module")
def stream_run(repo, tmp_path_factory):
    out = tmp_path_factory.mktemp("stream") / "run"
    assert main(["run", str(repo / "examples" / "stream-72.yaml"), "-o", str(out), "--no-progress"]) == 0
    made = rep.report(out)
    return out, made


def pages_of(html_text: str) -> tuple[list[str], list[str]]:
    return re.findall(r'<img src="([^"]+)"', html_text), re.findall(r'<a href="([^"]+)"', html_text)


def test_a_run_page_shows_every_plot_and_links_its_tables(stream_run):
    out, made = stream_run
    page = out / "report" / "index.html"
    assert page in made
    imgs, links = pages_of(page.read_text())
    pngs = sorted(p.name for p in (out / "report").glob("*.png"))
    assert {"jobs-gantt.png", "jobs-schedule.png", "jobs-queue.png"} <= set(pngs) and sorted(imgs) == pngs
    assert {"../summary.json", "../jobs.parquet", "../iterations.parquet", "../manifest.json"} <= set(links)
    assert all((page.parent / link).exists() for link in links)
    summary = json.loads((out / "summary.json").read_text())
    assert f"{summary['events']:,d}" in page.read_text()


def test_a_bench_page_links_every_run_page_plot_and_table(bench):
    out, res, made = bench
    page = out / "report" / "index.html"
    text = page.read_text()
    imgs, links = pages_of(text)
    # every PNG of the report folder and of the bench directory (the sweep's tradeoff-ft.png is written by bench)
    assert {"bench-policies.png", "curves.png", "tradeoff-ft.png"} <= set(imgs)
    for r in res["runs"]:
        assert f"{r['run']}/index.html" in links and (out / "report" / r["run"] / "index.html") in made
    assert "../bench.json" in links and "curves.txt" in links
    # where the time went: each run's event ratio and its wall split, as bench.json has them
    r0 = res["runs"][0]
    assert "Where the time went" in text and f"<td>{r0['theoretical_speedup']:.2f}</td>" in text
    assert all((page.parent / link).exists() for link in links + imgs)
    # a run's page: its iteration plots, the way back, the pure run it was judged against
    sub = out / "report" / res["runs"][0]["run"] / "index.html"
    sub_imgs, sub_links = pages_of(sub.read_text())
    assert sorted(sub_imgs) == ["iterations-a.png", "iterations-b.png"]
    assert "../index.html" in sub_links and "../../pure/summary.json" in sub_links
    assert all((sub.parent / link).exists() for link in sub_links + sub_imgs)


def captured(monkeypatch):
    figs = []
    monkeypatch.setattr(rep, "_save", lambda fig, path: figs.append(fig) or Path(path))
    return figs


def test_the_hybrid_iteration_plot_draws_the_pure_run(bench, monkeypatch):
    import pyarrow.parquet as pq

    out, res, _ = bench
    figs = captured(monkeypatch)
    rep.plot_iterations(out / res["runs"][0]["run"], out, pure_dir=out / "pure")
    t = pq.read_table(out / "pure" / "iterations.parquet").to_pydict()
    for fig, job in zip(figs, ("a", "b")):  # by hand: each iteration's mean over ranks of the pure run (us)
        want = {}
        for j, i, s, e in zip(t["job"], t["iteration"], t["start"], t["end"]):
            if j == job:
                want.setdefault(i, []).append((e - s) / 1e3)
        line = next(ln for ln in fig.axes[0].lines if ln.get_label() == "pure run (simulated)")
        assert np.allclose(line.get_ydata(), [np.mean(want[i]) for i in sorted(want)], rtol=1e-12)
    figs.clear()
    rep.plot_iterations(out / res["runs"][0]["run"], out)  # a run on its own: no pure line
    assert not any(ln.get_label() == "pure run (simulated)" for f in figs for ln in f.axes[0].lines)


def test_step_means_are_exact_time_weighted_means():
    t = [0.0, 1.0, 2.0, 4.0]
    v = [1.0, 0.0, 2.0, 2.0]                      # 1 on [0,1), 0 on [1,2), 2 on [2,4)
    assert [x.tolist() for x in rep.step_means(t, v, bins=10)] == [t, v]   # few steps: unchanged
    edges, m = rep.step_means(t, v, bins=2)
    assert edges.tolist() == [0.0, 2.0, 4.0] and m.tolist() == [0.5, 2.0, 2.0]
    # an instant at zero between two busy spans weighs what it lasts: 1,000 steps of full load broken by 1 ns gaps
    t = np.repeat(np.arange(1000) * 1000.0, 2) + np.tile([0.0, 999.0], 1000)
    v = np.tile([10.0, 0.0], 1000)
    edges, m = rep.step_means(t, v, bins=100)
    assert len(edges) == 101 and np.allclose(m[:-1], 10 * 999 / 1000, rtol=1e-3)


def test_the_scheduling_gantt_draws_every_job(monkeypatch):
    import pyarrow as pa

    n = 1000
    arrival = np.arange(n) * 10.0
    t = pa.table({"name": [f"j{i}" for i in range(n)], "size": np.full(n, 4.0), "submit": arrival,
                  "start": arrival + 5, "end": arrival + 50})
    figs = captured(monkeypatch)
    rep.plot_gantt_chart(t, "unused.png", nodes=64)
    ax = figs[0].axes[0]
    runs = [c for c in ax.collections if len(c.get_paths()) == n]
    assert runs and ax.get_title().startswith(f"schedule: {n} jobs on 64 nodes")  # every job, not the first 120


def test_the_stream_gantt_has_a_legend_of_its_jobs(repo, stream_run, monkeypatch):
    import yaml

    out, _ = stream_run
    figs = captured(monkeypatch)
    rep.plot_gantt(out, out)
    legend = figs[0].axes[0].get_legend()
    names = [j["name"] for j in yaml.safe_load((repo / "examples" / "stream-72.yaml").read_text())["jobs"]]
    assert [t.get_text() for t in legend.get_texts()] == names


# ------------------------------------------------------------------------------------------ in headless Chromium
CHROMIUM = next((shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)

#: a page that opens a report page in a frame, waits for its images, fetches every link, follows the links to other
#: index.html pages of the report, and writes one line per image and link
CHECKER = """<!DOCTYPE html><html><body><pre id="out">pending</pre><script>
const seen = new Set(), out = [];
function load(url) { return new Promise(res => { const f = document.createElement('iframe');
  f.onload = () => res(f.contentDocument); f.src = url; document.body.appendChild(f); }); }
async function check(url) {
  if (seen.has(url)) return; seen.add(url);
  const d = await load(url);
  const imgs = [...d.images];
  await Promise.all(imgs.map(i => i.complete ? null : new Promise(r => { i.onload = i.onerror = r; })));
  for (const i of imgs) out.push('img ' + (i.naturalWidth > 0 ? 'ok ' : 'BROKEN ') + i.src);
  for (const a of d.querySelectorAll('a[href]')) {
    let ok = false;
    try { const r = await fetch(a.href); ok = r.ok || r.status === 0; if (ok) await r.arrayBuffer(); } catch (e) {}
    out.push('link ' + (ok ? 'ok ' : 'MISSING ') + a.href);
    if (ok && a.href.endsWith('/index.html')) await check(a.href);
  }
}
check(decodeURIComponent(location.hash.slice(1))).then(() => {
  document.getElementById('out').textContent = out.join('\\n') + '\\nchecked ' + seen.size + ' pages';
});
</script></body></html>"""


def in_chromium(page: Path, tmp_path: Path) -> list[str]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    checker = tmp_path / "check.html"
    checker.write_text(CHECKER)
    url = f"{checker.as_uri()}#{urllib.parse.quote(page.resolve().as_uri())}"
    r = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--allow-file-access-from-files",
                        f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=30000", "--dump-dom", url],
                       capture_output=True, text=True, timeout=180)
    found = re.search(r'<pre id="out">(.*?)</pre>', r.stdout, re.S)
    assert found, r.stderr[-2000:]
    return found.group(1).splitlines()


@pytest.mark.skipif(CHROMIUM is None, reason="test_report_pages_in_headless_chromium: no chromium on PATH "
                                             "(apt-get install chromium)")
def test_report_pages_in_headless_chromium(bench, stream_run, tmp_path):
    out, res, _ = bench
    lines = in_chromium(out / "report" / "index.html", tmp_path / "bench")
    pages = 2 + len(res["runs"])  # the bench's, each run's and the pure run's
    assert lines[-1] == f"checked {pages} pages"
    assert sum(ln.startswith("img ok") for ln in lines) >= 3 + 2 * len(res["runs"])
    assert not [ln for ln in lines[:-1] if not ln.startswith(("img ok", "link ok"))]
    run_dir, _ = stream_run
    lines = in_chromium(run_dir / "report" / "index.html", tmp_path / "run")
    assert lines[-1] == "checked 1 pages" and not [ln for ln in lines[:-1] if " ok " not in ln]
    # the check sees a broken image and a missing link
    (run_dir / "report" / "jobs-queue.png").write_bytes(b"not a png")
    (run_dir / "jobs.parquet").unlink()
    lines = in_chromium(run_dir / "report" / "index.html", tmp_path / "broken")
    assert any(ln.startswith("img BROKEN") and ln.endswith("jobs-queue.png") for ln in lines)
    assert any(ln.startswith("link MISSING") and ln.endswith("jobs.parquet") for ln in lines)
