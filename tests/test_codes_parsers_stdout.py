"""CODES stdout, ross.csv and time.txt parsers."""

from __future__ import annotations


import pytest

from codes_bridge.parsers.common import CodesParseError
from codes_bridge.parsers.stdout import parse_model_output, parse_ross_csv, parse_time_txt
from refdata import CODES

C = CODES / "C-1056node-milc-lammps-nn"


def test_job_completion_and_rank_completion_1056():
    mo = parse_model_output(C / "hf-random-seq" / "model-output.txt")
    assert mo.complete
    assert mo.job_end == {0: 2631486.3136, 1: 11034386.4126, 2: 589592.7118}
    assert len(mo.rank_end) == 512 + 256 + 256
    for app, t in mo.job_end.items():
        worst = max(v for (a, _), v in mo.rank_end.items() if a == app)
        assert abs(worst - t) < 1e-4  # stdout prints the job time with 4 decimals


@pytest.mark.parametrize("run", ["B-72node-milc/hf-opt-np2", "B-72node-milc/hf-seq",
                                 "C-1056node-milc-lammps-nn/hf-random-seq", "A-72node-synthetic-uniform/opt-np2"])
def test_ross_statistics_agree_with_ross_csv(run):
    mo = parse_model_output(CODES / run / "model-output.txt")
    rc = parse_ross_csv(CODES / run / "ross.csv")
    assert mo.ross["events_processed"] == rc["events_processed"]
    assert mo.ross["events_committed"] == rc["net_events"]
    assert mo.ross["events_rolled_back"] == rc["events_rb"]
    assert mo.ross["rollbacks"] == rc["rb_total"]
    assert mo.ross["running_time_s"] == rc["runtime"]
    assert abs(mo.ross["event_rate"] - rc["event_rate"]) < 0.1
    assert mo.ross["events_committed"] == mo.ross["events_processed"] - mo.ross["events_rolled_back"]


def test_optimistic_run_stats():
    mo = parse_model_output(CODES / "B-72node-milc" / "hf-opt-np2" / "model-output.txt")
    assert mo.ross["rollbacks"] == 327423 and mo.ross["events_committed"] == 6351963
    assert mo.ross["gvt_computations"] == 14765 and mo.data_missed == {0: 0, 1: 0}
    rc = parse_ross_csv(CODES / "B-72node-milc" / "hf-opt-np2" / "ross.csv")
    assert rc["total_pe"] == 2 and rc["analysis_lps_net_events"] == 6400  # the 8 trailing per-LP-class values


def test_failed_run_is_not_complete():
    d = C / "appsurr-random-seq-patched"
    mo = parse_model_output(d / "model-output.txt")
    assert not mo.complete and mo.job_end == {} and mo.ross == {}
    assert any("Predictor for node was not initialized" in e for e in mo.errors)
    assert parse_ross_csv(d / "ross.csv") == {}
    assert parse_time_txt(d / "time.txt")["exit_status"] == 1


def test_ross_csv_without_network_columns_and_truncated(tmp_path):
    rc = parse_ross_csv(CODES / "B-72node-milc" / "surrogate-patched-seq" / "ross.csv")  # 53 values, 55 names
    assert rc["net_events"] == 1257658 and rc["pe_struct"] == 1328 and "remote_sends" not in rc
    lines = (CODES / "B-72node-milc" / "hf-seq" / "ross.csv").read_text().splitlines()
    p = tmp_path / "ross.csv"
    p.write_text(lines[0] + "\n" + ",".join(lines[1].split(",")[:20]) + "\n")
    with pytest.raises(CodesParseError, match=r"ross.csv:2: 20 values for 55 columns"):
        parse_ross_csv(p)


def test_time_txt_formats(tmp_path):
    assert parse_time_txt(CODES / "E-72node-milc-lammps-syn" / "hf-random-seq" / "time.txt") == {
        "wall_s": 11 * 60 + 18.67, "max_rss_kb": 260420, "exit_status": 0}
    assert parse_time_txt(CODES / "B-72node-milc" / "hf-seq" / "time.txt") == {"wall_s": 8.864}
    p = tmp_path / "time.txt"
    p.write_text("\tElapsed (wall clock) time (h:mm:ss or m:ss): 1:02:03.5\n")
    assert parse_time_txt(p)["wall_s"] == 3723.5


def test_malformed_app_line(tmp_path):
    p = tmp_path / "model-output.txt"
    p.write_text("----------\nPer App Max Elapsed Times:\n\tApp 0: 12.5\n\tApp one: 3\n")
    with pytest.raises(CodesParseError, match=r"model-output.txt:4: unexpected line"):
        parse_model_output(p)
