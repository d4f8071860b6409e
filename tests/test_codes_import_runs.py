"""Import every reference CODES run: record counts, job completion against stdout, port byte totals against the
correct (G and CN) lines of dragonfly-link-stats, partial-run detection, run-directory output and the CLI."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest

from codes_bridge.importer import import_codes_run, read_codes_run
from codes_bridge.parsers.common import CodesWarning
from codes_bridge.parsers.lpio import parse_link_stats
from codes_bridge.parsers.stdout import parse_model_output
from hybridsim.cli import main as cli_main
from hybridsim_common.records import PORT_FEATURES, read_iterations, read_ports, records_from_table
from hybridsim_common.rundir import read_manifest
from refdata import CODES, REFERENCE_CODES

# run -> (records per job id, port samples source kind, job names)
RUNS = {
    "A-72node-synthetic-uniform/seq": ({}, "bin", ["synthetic1"]),
    "A-72node-synthetic-uniform/opt-np2": ({}, "csv", ["synthetic1"]),
    "B-72node-milc/hf-seq": ({0: 72 * 20}, "csv", ["milc-72"]),
    "B-72node-milc/hf-opt-np2": ({0: 72 * 20}, "csv", ["milc-72"]),
    "B-72node-milc/surrogate-patched-seq": ({0: 72 * 5}, "traffic", ["milc-72"]),
    "B-72node-milc/surrogate-unpatched-seq": ({0: 72 * 20}, "traffic", ["milc-72"]),
    "C-1056node-milc-lammps-nn/hf-random-seq": ({0: 512 * 6, 1: 256 * 6}, "csv", ["milc-512", "lammps-256", "nn-256"]),
    "C-1056node-milc-lammps-nn/netsurr-fixed-random-seq": ({0: 512 * 6, 1: 256 * 6}, "traffic",
                                                           ["milc-512", "lammps-256", "nn-256"]),
    "E-72node-milc-lammps-syn/hf-random-seq": ({0: 36 * 1600, 1: 32 * 230}, "csv",
                                               ["milc-36", "lammps-32", "synthetic1"]),
    "F-1056node-milc-lammps-syn/hf-random-opt-np2": ({0: 512 * 180, 1: 256 * 44}, "csv",
                                                     ["milc-512", "lammps-256", "synthetic1"]),
}
#: the long runs, whose sample tables are not in tests/data: read from HYBRIDSIM_REFERENCE_DATA
REFERENCE_RUNS = ("C-1056node-milc-lammps-nn/hf-random-seq", "E-72node-milc-lammps-syn/hf-random-seq",
                  "F-1056node-milc-lammps-syn/hf-random-opt-np2")


def run_dir(name: str) -> Path:
    return (REFERENCE_CODES if name in REFERENCE_RUNS else CODES) / name


class _Runs(dict):
    """Runs read on first use (a test that is skipped reads nothing)."""

    def __missing__(self, name):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", CodesWarning)
            self[name] = read_codes_run(run_dir(name))
        return self[name]


@pytest.fixture(scope="module")
def runs():
    return _Runs()


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.reference_data) if n in REFERENCE_RUNS else n
                                  for n in RUNS])
def test_counts_names_and_completion(runs, name):
    per_job, source, names = RUNS[name]
    run = runs[name]
    d = run_dir(name)
    assert not run.partial
    assert run.job_names == names
    counts = {}
    for r in run.records:
        counts[r.job_id] = counts.get(r.job_id, 0) + 1
    assert counts == per_job
    mo = parse_model_output(d / ("model-output.txt" if (d / "model-output.txt").exists() else "model-output.txt.gz"))
    assert run.job_end == {names[j]: t for j, t in mo.job_end.items()}
    # the last iteration mark of each iterating job is its completion time (stdout rounds to 4 decimals)
    for j in per_job:
        last = max(r.end for r in run.records if r.job_id == j)
        assert abs(last - run.job_end[names[j]]) < 1e-3
    assert run.ross["events_committed"] > 0 and run.ross["running_time_s"] > 0
    assert {"bin": ".bin", "csv": "vt-router.csv", "traffic": "traffic-sample"}[source] in run.port_source
    assert run.ports.features == (PORT_FEATURES if source != "traffic" else ("bytes", "util_pct"))


@pytest.mark.reference_data
def test_the_1056_node_run_has_4608_records(runs):
    assert len(runs["C-1056node-milc-lammps-nn/hf-random-seq"].records) == 4608


@pytest.mark.reference_data
@pytest.mark.parametrize("name", ["E-72node-milc-lammps-syn/hf-random-seq",
                                  "F-1056node-milc-lammps-syn/hf-random-opt-np2"])
def test_port_byte_totals_equal_link_stats(runs, name):
    run = runs[name]
    with pytest.warns(CodesWarning, match="local"):
        ls = parse_link_stats(next((REFERENCE_CODES / name / "lp-io").glob("dragonfly-link-stats*")))
    tot = ls.router_port_totals(run.conf.topology(REFERENCE_CODES / name))
    ok = ~np.isnan(tot["traffic"])
    sums = np.nansum(run.ports.feature("bytes").astype(np.float64), axis=0)
    assert ok.sum() > 0 and np.array_equal(sums[ok], tot["traffic"][ok])


def test_counting_windows_that_end_before_the_run_undercount(runs):
    # netsurr: 240 counting windows x 50 us = 12 ms < the run's 12.35 ms, so the windowed totals fall short
    name = "C-1056node-milc-lammps-nn/netsurr-fixed-random-seq"
    run = runs[name]
    assert run.ports.t_end[-1] == 12e6 < run.end_time
    with pytest.warns(CodesWarning, match="local"):
        tot = parse_link_stats(CODES / name / "lp-io" / "dragonfly-link-stats").router_port_totals(
            run.conf.topology(CODES / name))
    ok = ~np.isnan(tot["traffic"])
    sums = run.ports.feature("bytes").astype(np.float64).sum(axis=0)[ok]
    assert (sums <= tot["traffic"][ok]).all() and (sums < tot["traffic"][ok]).any()


@pytest.mark.reference_data
def test_idle_tail_trimmed_and_sampling_interval(runs):
    e = runs["E-72node-milc-lammps-syn/hf-random-seq"]
    # VT samples every 250 us up to --vt-samp-end 800 ms (3,200); the all-zero ones after the end (592.2 ms) go
    assert e.ports.interval == 250000.0 and e.ports.values.shape == (2369, 36 * 7, 6)
    assert e.ports.t_end[-1] == 2369 * 250000.0 >= e.end_time > e.ports.t_end[-2]
    assert e.ports.meta["trimmed_idle_samples"] == 3200 - 2369
    u = e.ports.feature("util_pct")
    assert 0 <= np.nanmin(u) and np.nanmax(u) <= 100.0


def test_link_totals_in_engine_format(runs):
    name = "B-72node-milc/hf-seq"
    run = runs[name]
    lt = run.link_totals
    assert lt["radix"] == 7 and len(lt["bytes"]) == 252 and not np.isnan(lt["bytes"]).any()
    assert list(lt["port_class"][:7]) == [0, 0, 0, 1, 1, 2, 2]
    with pytest.warns(CodesWarning):
        tot = parse_link_stats(CODES / name / "lp-io" / "dragonfly-link-stats").router_port_totals(
            run.conf.topology(CODES / name))
    ok = ~np.isnan(tot["traffic"])
    assert np.array_equal(lt["bytes"][ok], tot["traffic"][ok])
    local = lt["port_class"] == 0
    assert np.array_equal(lt["bytes"][local], run.ports.feature("bytes").astype(np.float64).sum(axis=0)[local])
    bw = np.where(lt["port_class"] == 1, 4.7, 5.25) * 2**30 / 1e9
    np.testing.assert_allclose(lt["util_pct"], lt["bytes"] / (bw * 8843603.8612) * 100)
    res = run.to_simulation_result()
    assert res.link_totals is lt and res.events == 6348763 and res.end_time == 8843603.8612
    # a synthetic-only run has no job time: its end is the command's --end
    a = runs["A-72node-synthetic-uniform/seq"]
    assert a.end_time == 2_000_000.0


def test_skipped_iterations_are_marked(runs):
    run = runs["B-72node-milc/surrogate-patched-seq"]
    assert run.simulated.count(False) == 72
    assert any("SKIPPED TO ITERATION" in w for w in run.warnings)
    assert any("busytime" in w and "bug" in w for w in run.warnings)


def test_partial_run_is_imported_as_partial(tmp_path):
    src = CODES / "C-1056node-milc-lammps-nn" / "appsurr-random-seq-patched"
    with pytest.warns(CodesWarning, match="imported as PARTIAL"):
        run = import_codes_run(src, tmp_path / "out")
    assert run.partial and run.job_end == {} and run.ports is None
    assert len(run.records) == 449  # the 450th line is cut off mid-word ("ITERA")
    assert any("pe=0.txt:450: dropped the truncated last line" in w for w in run.warnings)
    man = read_manifest(tmp_path / "out")
    assert man["kind"] == "codes-import" and man["status"] == "completed" and man["partial"] is True
    assert "did not finish" in man["reason"]
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["partial"] is True and not (tmp_path / "out" / "ports.parquet").exists()


def test_run_directory_round_trip(tmp_path, runs):
    src = CODES / "B-72node-milc" / "surrogate-patched-seq"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CodesWarning)
        run = import_codes_run(src, tmp_path / "b")
    table = read_iterations(tmp_path / "b" / "iterations.parquet")
    assert records_from_table(table) == run.records
    assert table.column("mode").to_pylist().count("predict") == 72
    ports = read_ports(tmp_path / "b" / "ports.parquet")
    assert np.array_equal(ports.values, run.ports.values) and ports.interval == 50000.0
    man = read_manifest(tmp_path / "b")
    assert man["kind"] == "codes-import" and man["status"] == "completed" and not man["partial"]
    assert man["scenario"]["jobs"][0]["name"] == "milc-72"
    s = json.loads((tmp_path / "b" / "summary.json").read_text())
    assert s["jobs"]["milc-72"]["completion_time_ns"] == 8671699.1968
    assert s["jobs"]["milc-72"]["iterations_skipped"] == 72 and s["events"] == 1257658
    assert s["wall_s"] == 2.37


def test_cli(tmp_path, capsys):
    src = str(CODES / "B-72node-milc" / "hf-seq")
    out = str(tmp_path / "imp")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CodesWarning)
        assert cli_main(["import-codes", src, "-o", out]) == 0
        assert "1440 iteration records" in capsys.readouterr().out
        assert cli_main(["import-codes", src, "-o", out]) == 2  # exists, no --force
        assert "--force" in capsys.readouterr().err
        assert cli_main(["import-codes", src, "-o", out, "--force"]) == 0
        assert cli_main(["import-codes", str(tmp_path / "nope"), "-o", str(tmp_path / "x")]) == 2
        bad = tmp_path / "badrun"
        bad.mkdir()
        (bad / "dfdally.conf").write_text("LPGROUPS\n{\n  G\n  {\n    repetitions=\"2\"\n  }\n}\n")
        assert cli_main(["import-codes", str(bad), "-o", str(tmp_path / "y")]) == 2
        assert "dfdally.conf:5: repetitions: missing ';'" in capsys.readouterr().err
        assert not (tmp_path / "y").exists()


def _director_standin(tmp_path: Path, start: int = 5, end: int = 18) -> Path:
    """Run B (high fidelity) as CODES' ZeroMQ director writes it: a DIRECTOR section in the .conf, and no
    ITERATION line (nor SKIPPED line) for the iterations it skipped inside the surrogate window [start, end)."""
    import shutil
    import stat

    src = CODES / "B-72node-milc" / "hf-seq"
    d = tmp_path / "director-run"
    shutil.copytree(src, d, ignore=shutil.ignore_patterns("ross_all_lp_stats"))
    for p in [d, *d.rglob("*")]:
        p.chmod(p.stat().st_mode | stat.S_IWUSR)
    conf = d / "dfdally-72-milc.conf"
    conf.write_text(conf.read_text() + f'\nDIRECTOR\n{{\n   surrogate_family="iteration-time";\n   start_iter="{start}";'
                                       f'\n   end_iter="{end}";\n}}\n')
    log = d / "iteration-logs" / "pe=0.txt"
    keep = [l for l in log.read_text().splitlines(keepends=True) if not start <= int(l.split()[1]) < end]
    log.write_text("".join(keep))
    return d


def test_director_run_marks_the_surrogate_window_predicted(tmp_path):
    """A director run's iteration logs jump over the surrogate window: the record after each jump spans the
    predicted iterations and is marked predict, so iteration statistics come from simulated iterations only, while
    the completion time stays CODES' own."""
    d = _director_standin(tmp_path)
    # independent expectation: the reference iteration times outside the window [5, 18]
    ends = {}
    for line in (CODES / "B-72node-milc" / "hf-seq" / "iteration-logs" / "pe=0.txt").read_text().splitlines():
        f = line.split()
        ends[(int(f[7]), int(f[1]))] = float(f[9])
    durs = [ends[(r, i)] - (ends[(r, i - 1)] if i else 0.0) for (r, i) in ends if not 5 <= i <= 18]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CodesWarning)
        run = import_codes_run(d, tmp_path / "out")
    assert not run.partial and len(run.records) == 72 * 7
    pred = [r for r, s in zip(run.records, run.simulated) if not s]
    assert len(pred) == 72 and {r.iteration for r in pred} == {18}
    assert all(r.start == ends[(r.rank, 4)] and r.end == ends[(r.rank, 18)] for r in pred)
    assert any("surrogate window" in w and "DIRECTOR" in w for w in run.warnings)
    s = json.loads((tmp_path / "out" / "summary.json").read_text())["jobs"]["milc-72"]
    assert s["mean_iteration_ns"] == pytest.approx(np.mean(durs), rel=1e-12)
    assert s["completion_time_ns"] == 8843603.8612
    table = read_iterations(tmp_path / "out" / "iterations.parquet")
    assert table.column("mode").to_pylist().count("predict") == 72


def test_hand_made_run_directory_reads_the_command_from_stdout(tmp_path):
    """Without command.txt the command line comes from CODES' stdout (its first line): the VT binary is found under
    --stats-path, the sampling interval is --vt-interval and the end is --end (run A: 100 us, 2 ms)."""
    import shutil
    import stat

    d = tmp_path / "by-hand"
    shutil.copytree(CODES / "A-72node-synthetic-uniform" / "seq", d,
                    ignore=shutil.ignore_patterns("command.txt", "ross-stats-decoded", "ross_all_lp_stats"))
    for p in [d, *d.rglob("*")]:
        p.chmod(p.stat().st_mode | stat.S_IWUSR)
    (d / "ross-stats").mkdir()
    (d / "ross-stats-raw" / "ross-stats-analysis-lps.bin.gz").rename(d / "ross-stats" / "ross-stats-analysis-lps.bin.gz")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CodesWarning)
        run = read_codes_run(d)
    assert not run.partial and run.port_source.endswith("ross-stats/ross-stats-analysis-lps.bin.gz")
    assert run.ports.interval == 100_000.0 and set(run.ports.features) == set(PORT_FEATURES)
    assert run.end_time == 2_000_000.0
