"""hybridsim bench metrics (docs/design.md §5) and report plots, on the analytic stand-in backend."""

import json

import numpy as np
import pytest

from hybridsim.bench import format_table, run_bench
from hybridsim.cli_run import _parse_policy
from hybridsim.report import report
from hybridsim.scenario import parse_scenario

from fakes import FakeBackend, duration

SC = """
topology: {groups: 9, routers_per_group: 4, terminals_per_router: 2, global_channels_per_router: 2}
jobs:
  - {name: a, ranks: 4, iterations: 40, workload: {kind: allreduce}}
  - {name: b, ranks: 3, iterations: 40, workload: {kind: allreduce}}
surrogate: {model: last}
controller: {policy: surrogate, params: {warmup: 10}, sync: rank}
"""


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    sc = parse_scenario(SC)
    out = tmp_path_factory.mktemp("bench") / "b"
    res = run_bench(sc, out, policies=[("surrogate", {"warmup": 10}), ("pdes", {})], sweep_ft=[4, 8],
                    backend_factory=lambda s: FakeBackend(s))
    return out, res


def test_metrics_against_hand_computation(bench):
    out, res = bench
    sur = res["runs"][0]
    # events: pure simulates 40 iterations of 7 ranks, the hybrid only the 10 warm-up ones
    assert sur["theoretical_speedup"] == pytest.approx(40 / 10)
    assert sur["surrogate_fraction"] == pytest.approx(30 / 40)
    # LAST after a warm-up of 10: completion error and per-iteration MAPE in closed form (job a, 4 ranks)
    tp = max(sum(duration(0, r, i) for i in range(40)) for r in range(4))
    th = max(sum(duration(0, r, i) for i in range(10)) + 30 * duration(0, r, 9) for r in range(4))
    assert sur["jobs"]["a"]["completion_error_pct"] == pytest.approx(abs(th - tp) / tp * 100, rel=1e-9)
    mape = np.mean([abs(duration(0, r, 9) - duration(0, r, i)) / duration(0, r, i) * 100
                    for r in range(4) for i in range(10, 40)])
    assert sur["jobs"]["a"]["iteration_mape_pct"] == pytest.approx(mape, rel=1e-9)
    # job level: the signed completion error, and the job iteration-time MAPE of the job time (mean over ranks) LAST
    # predicts, each rank's iteration 9, against the pure mean over ranks
    assert sur["jobs"]["a"]["completion_error_signed_pct"] == pytest.approx((th - tp) / tp * 100, rel=1e-9)
    # the run's worst job with its sign: job b by hand as job a, the one further from zero
    tpb = max(sum(duration(1, r, i) for i in range(40)) for r in range(3))
    thb = max(sum(duration(1, r, i) for i in range(10)) + 30 * duration(1, r, 9) for r in range(3))
    worst = max(((th - tp) / tp * 100, (thb - tpb) / tpb * 100), key=abs)
    assert sur["worst_completion_error_signed_pct"] == pytest.approx(worst, rel=1e-9)
    assert abs(sur["worst_completion_error_signed_pct"]) == pytest.approx(sur["max_completion_error_pct"], rel=1e-12)
    # what stood in for the predicted jobs' traffic: the controller's keep_background (default true: the load)
    assert sur["standin"] == {"mode": "load", "keep_background": True}
    jt9 = np.mean([duration(0, r, 9) for r in range(4)])
    jmape = [abs(jt9 - np.mean([duration(0, r, i) for r in range(4)])) / np.mean([duration(0, r, i) for r in range(4)])
             * 100 for i in range(10, 40)]
    assert sur["jobs"]["a"]["job_iteration_mape_pct"] == pytest.approx(np.mean(jmape), rel=1e-9)
    jtb9 = np.mean([duration(1, r, 9) for r in range(3)])
    jtb = [np.mean([duration(1, r, i) for r in range(3)]) for i in range(40)]
    jmape_b = [abs(jtb9 - jtb[i]) / jtb[i] * 100 for i in range(10, 40)]
    assert sur["job_iteration_mape_pct"] == pytest.approx(np.mean(jmape + jmape_b), rel=1e-9)
    assert sur["mean_completion_error_pct"] == pytest.approx(
        np.mean([sur["jobs"][j]["completion_error_pct"] for j in "ab"]), rel=1e-12)
    pdes = res["runs"][1]
    assert pdes["theoretical_speedup"] == pytest.approx(1.0)
    assert pdes["max_completion_error_pct"] == 0.0 and pdes["surrogate_fraction"] == 0.0
    assert pdes["jobs_above_5pct"] == 0
    # the sweep runs the periodic policy at each Ft: f = (Ft-1)/Ft after the 8-iteration warm-up
    ft4 = next(r for r in res["runs"] if r["params"].get("ft") == 4)
    assert ft4["policy"] == "periodic"
    assert ft4["surrogate_fraction"] == pytest.approx(24 / 40)  # 32 post-warm-up iterations, 3 of 4 predicted
    assert (out / "tradeoff-ft.png").stat().st_size > 1000
    saved = json.loads((out / "bench.json").read_text())
    assert saved["runs"][0]["speedup"] == sur["speedup"]
    table = format_table(res)
    assert "speedup" in table and "00-surrogate-warmup10" in table
    assert any(r["run"].endswith("-ft4") for r in res["runs"])


def test_report_makes_pngs(bench):
    out, _ = bench
    made = report(out)
    names = {p.name for p in made}
    assert "bench-policies.png" in names and "tradeoff-ft.png" in names
    assert "iterations-a.png" in names
    for p in made:
        if p.suffix == ".png":
            assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the error-versus-speedup curve: Ft 4, 8, then zero-shot (the warm-up-only policy at the sweep's warm-up)
    assert "curves.png" in names
    rows = [ln.split() for ln in (out / "report" / "curves.txt").read_text().splitlines()[2:]]
    assert [r[1] for r in rows] == ["Ft=4", "Ft=8", "zero-shot"]


def test_parse_policy_specs():
    assert _parse_policy("periodic") == ("periodic", {})
    assert _parse_policy("periodic:ft=8,warmup=4") == ("periodic", {"ft": 8, "warmup": 4})
    assert _parse_policy("examples.policies.every_other:EveryOther") == ("examples.policies.every_other:EveryOther", {})
    assert _parse_policy("mod:Cls:warmup=3") == ("mod:Cls", {"warmup": 3})


@pytest.fixture(scope="module")
def judged(tmp_path_factory):
    """Two surrogates judged in the loop against one pure run."""
    sc = parse_scenario(SC)
    out = tmp_path_factory.mktemp("judged") / "b"
    backend = []

    def mk(s):
        backend.append(FakeBackend(s))
        return backend[-1]

    res = run_bench(sc, out, surrogates=["last", "mean:k=3"], sweep_ft=[4], backend_factory=mk)
    return out, res, backend


def test_surrogates_judged_against_one_pure_run(judged):
    out, res, backends = judged
    assert len(backends) == 7  # one pure run, one hybrid run per (policy, surrogate), the sweep ends zero-shot
    assert [r["surrogate"] for r in res["runs"]] == ["last", "mean"] * 3
    assert [r["surrogate_spec"] for r in res["runs"]] == ["last", "mean:k=3"] * 3
    assert [r["policy"] for r in res["runs"]] == ["surrogate"] * 2 + ["periodic"] * 2 + ["surrogate"] * 2
    assert [r.get("sweep") for r in res["runs"]] == [None, None, 4, 4, "zero-shot", "zero-shot"]
    last, mean = res["runs"][:2]
    assert last["run"] == "00-surrogate-warmup10-last" and mean["run"] == "01-surrogate-warmup10-mean_k=3"
    for r in (last, mean):
        assert r["theoretical_speedup"] == pytest.approx(40 / 10)
    # mean:k=3 predicts every later iteration of rank r of job a as the mean of its three last warm-up iterations
    # (7, 8, 9). (Job b's warm-up overlaps job a's predicted iterations, so its window edges leave its history.)
    for j, (jid, ranks) in {"a": (0, 4)}.items():
        m = {r: np.mean([duration(jid, r, i) for i in (7, 8, 9)]) for r in range(ranks)}
        per_rank = {r: np.mean([abs(m[r] - duration(jid, r, i)) / duration(jid, r, i) * 100 for i in range(10, 40)])
                    for r in range(ranks)}
        got = mean["jobs"][j]["rank_iteration_mape_pct"]
        assert set(got) == set(per_rank)
        for r in range(ranks):
            assert got[r] == pytest.approx(per_rank[r], rel=1e-9)
        assert mean["jobs"][j]["iteration_mape_pct"] == pytest.approx(np.mean(list(per_rank.values())), rel=1e-9)
        tp = max(sum(duration(jid, r, i) for i in range(40)) for r in range(ranks))
        th = max(sum(duration(jid, r, i) for i in range(10)) + 30 * m[r] for r in range(ranks))
        assert mean["jobs"][j]["completion_error_pct"] == pytest.approx(abs(th - tp) / tp * 100, rel=1e-9)
        # LAST: rank r's MAPE uses its iteration 9 only
        r0 = np.mean([abs(duration(jid, 0, 9) - duration(jid, 0, i)) / duration(jid, 0, i) * 100
                      for i in range(10, 40)])
        assert last["jobs"][j]["rank_iteration_mape_pct"][0] == pytest.approx(r0, rel=1e-9)
    b = mean["jobs"]["b"]
    assert len(b["rank_iteration_mape_pct"]) == 3
    assert b["iteration_mape_pct"] == pytest.approx(np.mean(list(b["rank_iteration_mape_pct"].values())), rel=1e-9)
    saved = json.loads((out / "bench.json").read_text())
    assert saved["runs"][1]["jobs"]["a"]["rank_iteration_mape_pct"]["0"] == pytest.approx(
        mean["jobs"]["a"]["rank_iteration_mape_pct"][0])
    assert (out / "01-surrogate-warmup10-mean_k=3" / "manifest.json").is_file()
    table = format_table(res, wide=True)
    assert "01-surrogate-warmup10-mean_k=3" in table and "rank MAPE median" in table
    # one speed-error curve per surrogate
    assert (out / "tradeoff-ft-last.png").is_file() and (out / "tradeoff-ft-mean_k=3.png").is_file()


def test_bad_surrogate_spec_fails_before_the_pure_run(tmp_path):
    from hybridsim.bench import BenchOptionError

    sc = parse_scenario(SC)
    made = []
    for spec, msg in (("nosuch", "unknown surrogate model 'nosuch'"), ("mean:k", "expects KEY=VALUE")):
        with pytest.raises(BenchOptionError, match=f"--surrogate {spec}: .*{msg}"):
            run_bench(sc, tmp_path / "b", surrogates=["last", spec],
                      backend_factory=lambda s: made.append(s) or FakeBackend(s))
    assert made == [] and not (tmp_path / "b").exists()


def test_cli_bench_surrogate_bad_spec_exits_2(tmp_path, capsys):
    from hybridsim.cli import main

    p = tmp_path / "s.yaml"
    p.write_text(SC)
    assert main(["bench", str(p), "-o", str(tmp_path / "b"), "--surrogate", "mean:k=eight"]) == 2
    assert "mean" in capsys.readouterr().err


def test_checkpoint_folder_as_surrogate(tmp_path):
    """A checkpoint folder (here a saved mean:k=3) judged beside the same model by name: the same predictions."""
    from surrogate.models.history import Mean

    ckpt = tmp_path / "ckpt-mean3"
    Mean(k=3).save(ckpt)
    res = run_bench(parse_scenario(SC), tmp_path / "b", surrogates=["mean:k=3", str(ckpt)],
                    backend_factory=lambda s: FakeBackend(s))
    by_name, by_ckpt = res["runs"]
    assert by_ckpt["run"] == "01-surrogate-warmup10-ckpt-mean3" and by_ckpt["surrogate_spec"] == str(ckpt)
    for j in ("a", "b"):
        assert by_ckpt["jobs"][j]["rank_iteration_mape_pct"] == by_name["jobs"][j]["rank_iteration_mape_pct"]
        assert by_ckpt["jobs"][j]["completion_error_pct"] == by_name["jobs"][j]["completion_error_pct"]
    (tmp_path / "not-a-ckpt").mkdir()
    from hybridsim.bench import BenchOptionError

    with pytest.raises(BenchOptionError, match="--surrogate .*not-a-ckpt"):
        run_bench(parse_scenario(SC), tmp_path / "b2", surrogates=[str(tmp_path / "not-a-ckpt")],
                  backend_factory=lambda s: FakeBackend(s))
    assert not (tmp_path / "b2").exists()


# ----------------------------------------------------------------------------------------- bench --pure, hostile
def _table(d, fn):
    """Rewrite ``d/iterations.parquet`` through ``fn(columns) -> columns``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    t = pq.read_table(d / "iterations.parquet")
    cols = fn({c: t.column(c).to_numpy(zero_copy_only=False) for c in t.column_names})
    pq.write_table(pa.table(cols), d / "iterations.parquet")


def _summary(d, fn):
    s = json.loads((d / "summary.json").read_text())
    (d / "summary.json").write_text(json.dumps(fn(s)))


def _manifest(d, fn):
    m = json.loads((d / "manifest.json").read_text())
    (d / "manifest.json").write_text(json.dumps(fn(m)))


def _other_scenario(d, other):
    """The pure run of ``other`` (seed 8) with this run's manifest scenario pasted in."""
    import shutil

    mine = json.loads((d / "manifest.json").read_text())["scenario"]
    shutil.rmtree(d)
    shutil.copytree(other, d)
    _manifest(d, lambda m: {**m, "scenario": mine})


def _relabelled(d, hybrid):
    """A hybrid run of the same scenario whose manifest says ``mode: simulate``."""
    import shutil

    shutil.rmtree(d)
    shutil.copytree(hybrid, d)
    _manifest(d, lambda m: _set(m, mode="simulate"))


def _set(d: dict, **kv) -> dict:
    return {**d, **kv}


#: (name, tampering of a copy of the pure run, what the refusal names when the digests are rewritten to match)
TAMPERED = [
    ("end x10", lambda d, o: _table(d, lambda t: _set(t, end=t["start"] + 10 * (t["end"] - t["start"]))),
     "its last iteration ends at"),
    ("NaN end", lambda d, o: _table(d, lambda t: _set(t, end=np.where(t["iteration"] == 3, np.nan, t["end"]))),
     "non-finite start or end"),
    ("end before start", lambda d, o: _table(d, lambda t: _set(t, end=t["start"] - 1.0)), "ends before it starts"),
    ("zero rows", lambda d, o: _table(d, lambda t: {k: v[:0] for k, v in t.items()}), "no rows for job 'a'"),
    ("dropped job", lambda d, o: _table(d, lambda t: {k: v[t["job_id"] == 0] for k, v in t.items()}),
     "no rows for job 'b'"),
    ("duplicated row", lambda d, o: _table(d, lambda t: {k: np.concatenate([v[:-1], v[:1]]) for k, v in t.items()}),
     "not each of its"),
    ("rank out of range", lambda d, o: _table(d, lambda t: _set(t, rank=np.where(t["rank"] == 1, 10**6, t["rank"]))),
     "outside 4 ranks x 40 iterations"),
    ("wall_s 1e9", lambda d, o: _summary(d, lambda s: _set(s, wall_s=1e9)), "does not fit in the run's own time"),
    ("wall_s 0", lambda d, o: _summary(d, lambda s: _set(s, wall_s=0)), "'wall_s' must be a finite number"),
    ("wall_s 'abc'", lambda d, o: _summary(d, lambda s: _set(s, wall_s="abc")), "'wall_s' must be a finite number"),
    ("summary a list", lambda d, o: _summary(d, lambda s: [s]), "a JSON object expected, not list"),
    ("completion NaN", lambda d, o: _summary(d, lambda s: _set(s, jobs={**s["jobs"], "a": {
        **s["jobs"]["a"], "completion_time_ns": float("nan")}})), "completion_time_ns' must be a finite time"),
    ("hybrid run relabelled", lambda d, o: _relabelled(d, o.parent / "hybrid"), "a hybrid run's"),
    ("other scenario's run", _other_scenario, "ran on other terminals"),
]


@pytest.fixture(scope="module")
def pure_runs(tmp_path_factory):
    """A pure run of the scenario (randomly placed), one of the same scenario with another seed, a hybrid run."""
    from hybridsim.runner import run_scenario

    other = parse_scenario(SC.replace("topology:", "seed: 8\nplacement: {policy: random}\ntopology:"))
    mine = parse_scenario(SC.replace("topology:", "placement: {policy: random}\ntopology:"))
    d = tmp_path_factory.mktemp("pure")
    run_scenario(mine, d / "mine", progress=False, backend=FakeBackend(mine))
    run_scenario(other, d / "other", progress=False, backend=FakeBackend(other))
    run_scenario(mine, d / "hybrid", mode="hybrid", progress=False, backend=FakeBackend(mine))
    return mine, d / "mine", d / "other"


def _bench_against(sc, pure, out):
    return run_bench(sc, out, policies=[("surrogate", {"warmup": 10})], pure_dir=pure,
                     backend_factory=lambda s: FakeBackend(s))


def test_an_untouched_pure_run_is_judged_against(pure_runs, tmp_path):
    from hybridsim_common.rundir import verify_digests

    sc, pure, _ = pure_runs
    verify_digests(pure)
    res = _bench_against(sc, pure, tmp_path / "b")
    # the pure run's events: 40 simulated iterations of 4 + 3 ranks at 100 events each
    assert res["pure"]["events"] == 40 * 7 * 100 and res["runs"][0]["theoretical_speedup"] == pytest.approx(4.0)


@pytest.mark.parametrize("name, tamper, _why", TAMPERED, ids=[t[0] for t in TAMPERED])
def test_a_tampered_pure_run_is_refused(pure_runs, tmp_path, name, tamper, _why):
    """Each edit changes a table, the summary or the manifest's identity: the recorded digests no longer match."""
    import shutil

    from hybridsim_common.rundir import RunDirError

    sc, pure, other = pure_runs
    d = tmp_path / "pure"
    shutil.copytree(pure, d)
    tamper(d, other)
    with pytest.raises(RunDirError, match="changed since the run completed"):
        _bench_against(sc, d, tmp_path / "b")
    assert not (tmp_path / "b").exists()


@pytest.mark.parametrize("name, tamper, why", [t for t in TAMPERED if t[2]], ids=[t[0] for t in TAMPERED if t[2]])
def test_pure_run_checks_hold_when_the_digests_are_rewritten(pure_runs, tmp_path, name, tamper, why):
    """The same edits with the digests recomputed to match (the digests catch accidents, not forgers): the checks of
    the scenario, the summary and the tables refuse each one, naming what is wrong."""
    import shutil

    from hybridsim_common.rundir import RunDirError, digests

    sc, pure, other = pure_runs
    d = tmp_path / "pure"
    shutil.copytree(pure, d)
    tamper(d, other)
    _manifest(d, lambda m: _set(m, digest=digests(d, m)))
    with pytest.raises(RunDirError, match=why):
        _bench_against(sc, d, tmp_path / "b")
    assert not (tmp_path / "b").exists()


def test_a_pure_run_without_digests_is_refused_with_how_to_redo_it(pure_runs, tmp_path, capsys):
    import shutil

    from hybridsim.cli import main

    sc, pure, _ = pure_runs
    d = tmp_path / "old"
    shutil.copytree(pure, d)
    _manifest(d, lambda m: {k: v for k, v in m.items() if k != "digest"})
    p = tmp_path / "s.yaml"
    p.write_text(SC.replace("topology:", "placement: {policy: random}\ntopology:"))
    assert main(["bench", str(p), "--pure", str(d), "-o", str(tmp_path / "b"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "records no digest" in err and "hybridsim run SCENARIO" in err and "without --pure" in err
    assert not (tmp_path / "b").exists()


@pytest.mark.parametrize("where", ["the input", "its parent", "inside it"])
def test_bench_never_writes_over_its_input(pure_runs, tmp_path, where):
    import shutil

    from hybridsim_common.rundir import RunDirError, verify_digests

    sc, pure, _ = pure_runs
    parent = tmp_path / "b1"
    shutil.copytree(pure, parent / "pure")
    d = parent / "pure"
    before = sorted(p.name for p in d.iterdir())
    out = {"the input": d, "its parent": parent, "inside it": d / "again"}[where]
    with pytest.raises(RunDirError, match="never writes over its own input"):
        run_bench(sc, out, pure_dir=d, force=True, backend_factory=lambda s: FakeBackend(s))
    assert sorted(p.name for p in d.iterdir()) == before
    verify_digests(d)


def test_json_files_are_strict_json(tmp_path):
    """NaN and infinities (a speedup over a zero wall time, an empty mean) are written as null, never as the
    non-JSON NaN / Infinity."""
    from hybridsim_common.rundir import write_json_atomic

    p = tmp_path / "x.json"
    write_json_atomic(p, {"speedup": float("inf"), "mape": np.float64("nan"), "ok": np.float32(1.5),
                          "list": [1, -float("inf"), np.array([2.0, np.nan])], "n": np.int64(3), "t": (True, None)})

    def refuse(c):
        raise ValueError(c)

    assert json.loads(p.read_text(), parse_constant=refuse) == {
        "speedup": None, "mape": None, "ok": 1.5, "list": [1, None, [2.0, None]], "n": 3, "t": [True, None]}


def test_paired_interval_against_a_hand_computation():
    """Differences 1, 2, 6: mean 3, sd = sqrt(((-2)^2 + (-1)^2 + 3^2) / 2) = sqrt(7), t(0.975, 2) = 4.3027 (table),
    half-width 4.3027 * sqrt(7) / sqrt(3) = 4.3027 * 1.52753 = 6.5724."""
    from hybridsim.bench import paired_interval

    got = paired_interval([1.0, 2.0, 6.0])
    assert got["n"] == 3 and got["mean_diff"] == pytest.approx(3.0)
    assert got["ci95"][0] == pytest.approx(3.0 - 6.5724, abs=3e-4)
    assert got["ci95"][1] == pytest.approx(3.0 + 6.5724, abs=3e-4)
    assert paired_interval([2.5])["ci95"] is None


def test_seeds_pair_each_surrogate_with_the_baselines(tmp_path):
    """Three seeds; the stand-in's iteration times grow with the seed, so errors differ per seed. Every surrogate is
    compared with LAST and MEAN (added as baselines) seed by seed, and the interval is the hand t-interval of the
    differences of the runs' own figures; the oracle answers with each seed's own pure run: no error at all."""
    from hybridsim.bench import format_paired

    sc = parse_scenario(SC)
    sc.seed = 5

    def mk(s):
        return FakeBackend(s, duration_fn=lambda j, r, i: duration(j, r, i) * (1 + 0.02 * (s.seed - 5) * (i % 4)))

    res = run_bench(sc, tmp_path / "b", surrogates=["ewma", "oracle"], seeds=3, backend_factory=mk)
    assert res["seeds"] == [5, 6, 7]
    assert {r["surrogate_spec"] for r in res["runs"]} == {"ewma", "oracle", "last", "mean"}
    assert (tmp_path / "b" / "seed6-pure" / "manifest.json").is_file()
    for r in res["runs"]:
        if r["surrogate_spec"] == "oracle":
            assert r["max_completion_error_pct"] == pytest.approx(0.0, abs=1e-9)
            assert r["job_iteration_mape_pct"] == pytest.approx(0.0, abs=1e-9)
    runs = {(r["surrogate_spec"], r["seed"]): r for r in res["runs"]}
    row = next(p for p in res["paired"] if p["surrogate"] == "ewma" and p["baseline"] == "last"
               and p["metric"] == "max_completion_error_pct")
    d = [runs[("ewma", s)]["max_completion_error_pct"] - runs[("last", s)]["max_completion_error_pct"]
         for s in (5, 6, 7)]
    half = 4.3027 * np.std(d, ddof=1) / np.sqrt(3)
    assert row["n"] == 3 and row["mean_diff"] == pytest.approx(np.mean(d), rel=1e-12)
    assert row["ci95"] == pytest.approx([np.mean(d) - half, np.mean(d) + half], abs=1e-4 * max(half, 1e-9) + 1e-12)
    assert not any(p["surrogate"] == p["baseline"] for p in res["paired"])
    assert "ewma" in format_paired(res) and "paired over seeds [5, 6, 7]" in format_table(res)


def test_seeds_refuse_one_pure_run(tmp_path):
    sc = parse_scenario(SC)
    with pytest.raises(ValueError, match="--seeds needs a pure run per seed"):
        run_bench(sc, tmp_path / "b", seeds=2, pure_dir=tmp_path / "pure", backend_factory=lambda s: FakeBackend(s))


def test_predictions_read_from_a_hybrid_runs_records_are_judged_like_a_controllers():
    """A backend that runs the policy itself (CODES' director) leaves its predictions only in its records: a
    predicted iteration lasts its prediction. Hand case: a 2-rank, 4-iteration job; iterations 2 and 3 predicted
    (rank times 110/130 and 90/90 against pure 100/120 and 100/100); the job time is the mean over ranks."""
    from hybridsim.bench import compare, predictions_from_records
    from hybridsim_common.records import IterationRecord

    sc = parse_scenario("""
topology: {groups: 3, routers_per_group: 2, terminals_per_router: 2, global_channels_per_router: 1}
jobs: [{name: a, ranks: 2, iterations: 4, workload: {kind: nearest_neighbor, dimension_sizes: [2], msg_size: 64}}]
""")
    pure_t = [[100, 100, 100, 100], [100, 100, 120, 100]]
    hyb_t = [[100, 100, 110, 90], [100, 100, 130, 90]]
    sim = [True, True, False, False]

    def records(times):
        out = []
        for r, row in enumerate(times):
            t = 0.0
            for i, d in enumerate(row):
                out.append(IterationRecord("a", 0, r, i, t, t + d))
                t += d
        return out

    pure, hyb = records(pure_t), records(hyb_t)
    preds = predictions_from_records(sc, hyb, sim * 2)
    model, pred, its = preds[0]
    assert its == [2, 3] and np.isnan(model[:, :2]).all() and model[1, 2] == 130
    psum = {"wall_s": 2.0, "events": 100, "jobs": {"a": {"completion_time_ns": 420.0}}}
    hsum = {"wall_s": 1.0, "events": 50, "jobs": {"a": {"completion_time_ns": 420.0}}}
    m = compare(sc, pure, psum, hsum, preds)
    j = m["jobs"]["a"]
    # job times: iteration 2 predicted 120 vs pure 110 (+9.09 %), iteration 3 predicted 90 vs 100 (-10 %)
    assert j["job_iteration_mape_pct"] == pytest.approx((10 / 110 + 10 / 100) / 2 * 100)
    # per rank: |110-100|/100, |130-120|/120, |90-100|/100 twice
    assert j["iteration_mape_pct"] == pytest.approx((0.1 + 10 / 120 + 0.1 + 0.1) / 4 * 100)
    assert j["surrogate_fraction"] == 0.5 and m["surrogate_fraction"] == 0.5 and j["completion_error_pct"] == 0
