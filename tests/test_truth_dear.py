"""benchmarks/truth_dear.py on the quickstart, one seed: its row holds what the bench's own files say (bench.json, the
runs' summary.json), recomputed here from the per-job figures; a completed bench is reused, not run again; the table
goes between its markers in the results file and nowhere else."""

import importlib.util
import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
QUICKSTART = REPO / "examples" / "quickstart.yaml"


def load_script():
    spec = importlib.util.spec_from_file_location("truth_dear", REPO / "benchmarks" / "truth_dear.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    td = load_script()
    out = tmp_path_factory.mktemp("truth-dear")
    d = td.bench_dir(out, "quickstart", 1)
    result = td.bench_one(QUICKSTART, 1, d)
    return td, out, d, result


def test_the_row_is_the_bench_own_figures(bench):
    td, _out, d, result = bench
    saved = json.loads((d / "bench.json").read_text())
    assert saved["runs"] and saved == json.loads(json.dumps(result))   # the file is what the call returned
    rows = td.rows_of(d, "quickstart")
    assert len(rows) == len(saved["runs"]) == 1
    row, run = rows[0], saved["runs"][0]
    psum = json.loads((d / "pure" / "summary.json").read_text())
    hsum = json.loads((d / run["run"] / "summary.json").read_text())
    assert row["scenario"] == "quickstart" and row["seed"] == 1 == run["seed"]
    assert row["pure CPU s"] == psum["cpu_s"] == saved["pure"]["cpu_s"] and row["hybrid CPU s"] == hsum["cpu_s"]
    assert row["CPU ratio"] == pytest.approx(psum["cpu_s"] / hsum["cpu_s"], rel=1e-12)
    assert row["CPU ratio"] == pytest.approx(run["cpu_speedup"], rel=1e-12)
    assert row["event ratio"] == pytest.approx(psum["events"] / hsum["events"], rel=1e-12)
    worst = max(abs(hsum["jobs"][j]["completion_time_ns"] - psum["jobs"][j]["completion_time_ns"])
                / psum["jobs"][j]["completion_time_ns"] * 100 for j in ("milc", "nn"))
    assert row["worst job error %"] == pytest.approx(worst, rel=1e-9, abs=1e-12)
    assert row["makespan error %"] is None and row["worst job run-time error %"] is None   # not a stream
    peak = json.loads((d / td.PEAK).read_text())["peak_rss_bytes"]
    assert row["peak memory GB"] == peak / 1e9 and 50e6 < peak < 8e9


def test_the_table_has_its_columns_and_the_row(bench):
    td, _out, d, _result = bench
    rows = td.rows_of(d, "quickstart")
    lines = td.format_table(rows).splitlines()
    assert lines[0] == "| " + " | ".join(td.COLUMNS) + " |"
    cells = [c.strip() for c in lines[2].strip("|").split("|")]
    assert len(lines) == 3 and len(cells) == len(td.COLUMNS)
    by = dict(zip(td.COLUMNS, cells))
    assert by["scenario"] == "quickstart" and by["seed"] == "1"
    assert float(by["CPU ratio"]) == pytest.approx(rows[0]["CPU ratio"], abs=0.006)
    assert float(by["event ratio"]) == pytest.approx(rows[0]["event ratio"], abs=0.006)
    assert by["makespan error %"] == "-"


def test_a_completed_bench_is_reused_and_the_table_replaced_in_place(bench, tmp_path, capsys):
    td, out, d, _result = bench
    stamp = (d / "bench.json").stat().st_mtime_ns
    results = tmp_path / "RESULTS.md"
    results.write_text("# Results\n\n## Before\n\ntext before\n")
    args = ["--seeds", "1", "--scenarios", str(QUICKSTART), "--out", str(out), "--results", str(results)]
    assert td.main(args) == 0
    assert "reused" in capsys.readouterr().out and (d / "bench.json").stat().st_mtime_ns == stamp
    first = results.read_text()
    assert first.startswith("# Results\n\n## Before\n\ntext before\n") and td.SECTION in first
    assert first.count(td.BEGIN) == 1 and "| quickstart | 1 |" in first
    results.write_text(first + "\n## After\n\ntext after\n")
    assert td.main(args) == 0
    second = results.read_text()
    assert second.count(td.BEGIN) == 1 and second.count(td.SECTION) == 1 and second.endswith("text after\n")
