"""hybridsim bench's printed tables: the narrow default (width, full words, one legend line, summary lines) against a
hand-built result, and the CLI's --wide."""

import math

import pytest

from hybridsim.bench_table import COLUMNS, LEGEND, SUMMARY_LINES, WIDTH, format_table


def run(name, **kw):
    r = {"run": name, "speedup": 2.5, "cpu_speedup": 3.0, "theoretical_speedup": 4.0, "efficiency": 0.625,
         "surrogate_fraction": 0.75, "max_completion_error_pct": 1.234, "mean_completion_error_pct": 0.5,
         "jobs_above_5pct": 0, "job_iteration_mape_pct": 2.0, "iteration_mape_pct": 3.0, "controller_s": 0.1,
         "inference_s": 0.2, "tuning_s": 0.3, "controller_pct": 10.0, "overhead_pct": 25.0,
         "worst_truth_bias_pct": 0.1, "jobs": {}}
    r.update(kw)
    return r


RESULT = {"runs": [run("00-confident-target_error2-ridge"),
                   run("01-periodic-ft4-warmup1-a-checkpoint-folder-with-a-very-long-name", speedup=0.31,
                       cpu_speedup=None, max_completion_error_pct=7.5, jobs_above_5pct=1,
                       job_iteration_mape_pct=math.nan, theoretical_speedup=1.25)]}


def test_narrow_table_fits_and_reads():
    text = format_table(RESULT)
    lines = text.splitlines()
    head, legend, rule, r0, r1 = lines[:5]
    assert max(len(ln) for ln in lines[:5]) <= WIDTH
    assert len(head) <= WIDTH and len(legend) <= WIDTH and legend == LEGEND
    assert [h for h, *_ in COLUMNS] == ["speedup", "CPU speedup", "predicted", "worst error", "mean error",
                                         "over 5 %", "job MAPE"]
    assert all(h in head for h, *_ in COLUMNS) and set(rule) == {"-"}
    # hand-formatted cells: 2.50, 3.00, 75 %, 1.23 %, 0.50 %, 0, 2.00 %
    assert r0.split()[1:] == ["2.50", "3.00", "75%", "1.23", "%", "0.50", "%", "0", "2.00", "%"]
    long = RESULT["runs"][1]["run"]
    assert r1.startswith(long[:18] + ".." + long[-18:] + " ") and r1.split()[1:] == ["0.31", "-", "75%", "7.50", "%", "0.50",
                                                                         "%", "1", "-"]
    # summary lines under the table: the fastest run within 5 %, why the slow one is slow (events skipped: 1 - 1/1.25)
    assert "fastest run within 5 % on every job: 00-confident-target_error2-ridge (speedup 2.50" in text
    assert ("01-periodic-ft4-warmup1-a-checkpoint-folder-with-a-very-long-name: slower than pure: 10 % of its wall in "
            "the controller, 25 % in inference and tuning; it skipped 20 % of the events") in text


def test_coverage_and_runs_truth_lines():
    r = run("00-confident", coverage=0.5, coverage_within=1, coverage_jobs=2, coverage_target_pct=2.0,
            coverage_promised=0.8, runs_truth="the pure run is cheap")
    text = format_table({"runs": [r]})
    assert "00-confident: coverage: 1 of 2 jobs within 2 % (the policy promises 80%)" in text
    assert "00-confident: ran the truth (the default controller): the pure run is cheap" in text
    assert "coverage: 1 of 2 jobs within 2 %" in format_table({"runs": [r]}, wide=True)


def test_summary_lines_are_a_list_a_figure_joins():
    extra = lambda result: [f"{len(result['runs'])} runs"]  # noqa: E731
    SUMMARY_LINES.append(extra)
    try:
        assert format_table(RESULT).splitlines()[-1] == "2 runs"
    finally:
        SUMMARY_LINES.remove(extra)


def test_wide_table_keeps_every_figure():
    text = format_table(RESULT, wide=True)
    assert "theor." in text and "rankMAPE%" in text and "4.00" in text
    assert LEGEND not in text


@pytest.mark.parametrize("wide", [False, True])
def test_cli_prints_the_narrow_table_by_default(tmp_path, capsys, monkeypatch, wide):
    import hybridsim.bench as bench
    from hybridsim.cli import main

    monkeypatch.setattr(bench, "run_bench", lambda *a, **k: RESULT)
    sc = tmp_path / "s.yaml"
    sc.write_text("topology: {groups: 9, routers_per_group: 4, terminals_per_router: 2, "
                  "global_channels_per_router: 2}\njobs:\n  - {name: a, ranks: 4, iterations: 4, "
                  "workload: {kind: allreduce}}\n")
    assert main(["bench", str(sc), "-o", str(tmp_path / "b")] + (["--wide"] if wide else [])) == 0
    out = capsys.readouterr().out
    assert (LEGEND in out) is not wide and ("rankMAPE%" in out) is wide
    assert "report/index.html" in out


def test_floor_lines_print_each_error_beside_its_floor():
    """A CODES bench (a backend running the policy itself) reports each job's perturbation floor: the narrow table
    prints it beside the job's signed error."""
    from hybridsim.bench_table import floor_lines

    r = {"runs": [{"run": "00-aligned", "perturbation_floor_pct": {"milc": 0.5, "lammps": -0.1},
                   "jobs": {"milc": {"completion_error_signed_pct": 1.234},
                            "lammps": {"completion_error_signed_pct": -0.5}}},
                  {"run": "01-embedded", "jobs": {"milc": {"completion_error_signed_pct": 0.1}}}]}
    assert floor_lines(r) == ["00-aligned: completion error milc +1.23 % (floor +0.50 %), lammps -0.50 % (floor -0.10 %)"]
