"""hybridsim corpus: a declared space of embedded-engine runs, drawn deterministically, run resumably."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hybridsim.cli import main
from hybridsim.corpus import CorpusError, build_corpus, load_corpus, load_spec, scenario_of
from hybridsim_common.rundir import read_manifest

SPEC = """\
name: tiny
seed: 5
runs: 2
base:
  sampling: {interval: 5us}
  output: {ports: false}
space:
  topology:
    - {groups: 3, routers_per_group: 2, terminals_per_router: 2, global_channels_per_router: 1}
  routing: [minimal, adaptive]
  placement: [random, contiguous]
  jobs: [1, 2]
  workloads: [allreduce, nearest_neighbor]
  ranks: [2, 4]
  iterations: [2, 3]
  msg_size: [512, 4096]
  background: [0, 0]
"""


def _spec(tmp_path, text=SPEC, name="spec.yaml"):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_same_spec_and_seed_draw_the_same_scenarios(tmp_path):
    a = load_spec(_spec(tmp_path))
    b = load_spec(_spec(tmp_path, name="again.yaml"))
    draws_a = [scenario_of(a, i)[1] for i in range(2)]
    assert draws_a == [scenario_of(b, i)[1] for i in range(2)]
    assert draws_a[0] != draws_a[1]
    # every job fits the 12 terminals; nearest-neighbour grids multiply to the ranks
    for d in draws_a:
        assert 1 <= len(d["jobs"]) <= 2 and sum(j["ranks"] for j in d["jobs"]) <= 12
        for j in d["jobs"]:
            assert 2 <= j["ranks"] <= 4 and 2 <= j["iterations"] <= 3
    # another seed draws other scenarios; more runs keep the first ones
    other = load_spec(_spec(tmp_path, SPEC.replace("seed: 5", "seed: 6"), "other.yaml"))
    assert [scenario_of(other, i)[1] for i in range(2)] != draws_a
    more = load_spec(_spec(tmp_path, SPEC.replace("runs: 2", "runs: 5"), "more.yaml"))
    assert [scenario_of(more, i)[1] for i in range(2)] == draws_a


def test_corpus_runs_then_resumes_with_nothing_to_do(tmp_path, capsys):
    spec, out = _spec(tmp_path), tmp_path / "c"
    assert main(["corpus", str(spec), "-o", str(out), "--no-progress"]) == 0
    first = capsys.readouterr().out
    assert "2 runs, 0 already completed, 2 to run" in first
    m = load_corpus(out)
    assert m["kind"] == "corpus" and m["spec"]["name"] == "tiny" and m["counts"]["completed"] == 2
    mtimes = {}
    for r in m["runs"]:
        rm = read_manifest(out / r["dir"])
        assert rm["status"] == "completed" and rm["scenario"]["name"] == f"tiny-{r['id']:04d}"
        assert rm["scenario"]["seed"] == r["params"]["seed"]
        assert [j["name"] for j in rm["scenario"]["jobs"]] == [j["name"] for j in r["params"]["jobs"]]
        assert (out / r["dir"] / "iterations.parquet").is_file()
        mtimes[r["dir"]] = os.stat(out / r["dir"] / "manifest.json").st_mtime_ns
    # second invocation: nothing runs, nothing in the run directories changes
    assert main(["corpus", str(spec), "-o", str(out), "--no-progress"]) == 0
    assert "2 runs, 2 already completed, 0 to run" in capsys.readouterr().out
    again = load_corpus(out)
    assert [(r["status"], r["wall_s"], r["events"]) for r in again["runs"]] == \
        [(r["status"], r["wall_s"], r["events"]) for r in m["runs"]]
    assert again["created"] == m["created"]
    for d, t in mtimes.items():
        assert os.stat(out / d / "manifest.json").st_mtime_ns == t
    # a run that did not complete (here: marked failed) runs again, alone
    p = out / "runs" / "0001" / "manifest.json"
    bad = json.loads(p.read_text())
    bad["status"] = "failed"
    p.write_text(json.dumps(bad))
    assert main(["corpus", str(spec), "-o", str(out), "--no-progress"]) == 0
    assert "2 runs, 1 already completed, 1 to run" in capsys.readouterr().out
    assert read_manifest(p.parent)["status"] == "completed"
    assert os.stat(out / "runs" / "0000" / "manifest.json").st_mtime_ns == mtimes["runs/0000"]
    # the spec changed under a completed run: an error, not a silent mix
    changed = _spec(tmp_path, SPEC.replace("seed: 5", "seed: 9"), "changed.yaml")
    assert main(["corpus", str(changed), "-o", str(out), "--no-progress"]) == 2
    assert "different scenario" in capsys.readouterr().err


def test_corpus_with_two_workers(tmp_path):
    m = build_corpus(_spec(tmp_path), tmp_path / "c", workers=2, progress=False, out=open(os.devnull, "w"))
    assert [r["status"] for r in m["runs"]] == ["completed", "completed"]
    assert all(r["wall_s"] > 0 for r in m["runs"])


@pytest.mark.parametrize("edit, where, msg", [
    (("runs: 2", "runs: 0"), ":3:7: runs:", "greater than or equal to 1"),
    (("  ranks: [2, 4]", "  ranks: [4, 2]"), ":14:10: space.ranks:", "low 4 > high 2"),
    (("  routing: [minimal, adaptive]", "  routing: [minimal, fastest]"), ":10:22: space.routing.1:", "fastest"),
    (("  jobs: [1, 2]", "  jobz: [1, 2]"), ":12:3: space.jobz:", "unknown key 'jobz'"),
    (("  sampling: {interval: 5us}", "  seed: 3"), ":5:3: base:", "base may not set seed"),
    (("groups: 3,", "groups: 0,"), ":9:16: space.topology.0.groups:", "greater than or equal to 1"),
    (("  ranks: [2, 4]", "  ranks: [20, 24]"), ":9:7: space.topology.0:", "12 terminals cannot hold"),
    (("runs: 2", "runs: 100000"), ":3:7: runs:", "less than or equal to 5000"),  # before drawing any of them
])
def test_spec_errors_name_file_line_and_field(tmp_path, capsys, edit, where, msg):
    spec = _spec(tmp_path, SPEC.replace(*edit))
    with pytest.raises(CorpusError) as exc:
        load_spec(spec)
    assert f"{spec}{where}" in str(exc.value) and msg in str(exc.value)
    assert main(["corpus", str(spec), "-o", str(tmp_path / "c"), "--no-progress"]) == 2
    assert msg in capsys.readouterr().err
    assert not (tmp_path / "c").exists()


def test_scenario_problem_in_base_points_at_base(tmp_path):
    spec = _spec(tmp_path, SPEC.replace("  output: {ports: false}", "  output: {ports: false, colour: red}"))
    with pytest.raises(CorpusError, match=r"spec.yaml:6:26: run 0: output.colour: unknown key 'colour'"):
        load_spec(spec)


def test_small_72_spec_in_the_repo_is_valid():
    from pathlib import Path

    ls = load_spec(Path(__file__).resolve().parents[1] / "corpora" / "small-72.yaml")
    kinds = {j["workload"]["kind"] for i in range(ls.spec.runs) for j in scenario_of(ls, i)[1]["jobs"]}
    assert kinds == {"milc", "lammps", "nearest_neighbor", "allreduce"}


# ------------------------------------------------------------------------------------------- hostile use (issue 21)
#: four runs that would each take minutes: only ever ended by a signal
LONG = SPEC.replace("runs: 2", "runs: 4").replace("  iterations: [2, 3]", "  iterations: [100000, 100000]") \
    .replace("  jobs: [1, 2]", "  jobs: [1, 1]").replace("  msg_size: [512, 4096]", "  msg_size: [65536, 65536]") \
    .replace("  workloads: [allreduce, nearest_neighbor]", "  workloads: [allreduce]") \
    .replace("  output: {ports: false}", "  output: {ports: false}\n  limits: {max_samples: 1000000000}")
REPO = Path(__file__).resolve().parents[1]
ENV = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""), OMP_NUM_THREADS="1")


def _running(out: Path, n: int, proc, timeout: float = 60.0) -> None:
    """Wait until ``n`` runs of the corpus ``out`` are writing (their staging manifests say running)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        found = 0
        for m in (out / "runs").glob(".*.partial/manifest.json"):
            try:
                found += json.loads(m.read_text()).get("status") == "running"
            except (OSError, ValueError):
                pass
        if found >= n:
            return
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        time.sleep(0.05)
    proc.kill()
    pytest.fail(f"{n} runs never started")


@pytest.mark.parametrize("how, rc", [("SIGTERM", 143), ("Ctrl-C", 130)])
def test_a_signal_stops_a_parallel_corpus_within_seconds(tmp_path, how, rc):
    """SIGTERM to the command (or Ctrl-C: SIGINT to its whole process group) cancels the queued runs, stops the two
    running ones (marked failed) and ends the command within seconds; corpus.json says what the disk says."""
    spec, out = _spec(tmp_path, LONG), tmp_path / "c"
    proc = subprocess.Popen([sys.executable, "-m", "hybridsim", "corpus", str(spec), "-o", str(out), "--workers", "2",
                             "--no-progress"], env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    _running(out, 2, proc)
    t0 = time.monotonic()
    if how == "SIGTERM":
        proc.send_signal(signal.SIGTERM)
    else:
        os.killpg(proc.pid, signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail("the corpus did not stop")
    assert time.monotonic() - t0 < 15
    assert proc.returncode == rc and "Traceback" not in err
    m = load_corpus(out)
    assert m["counts"] == {"completed": 0, "failed": 2, "pending": 2}
    for r in m["runs"]:
        on_disk = (out / r["dir"] / "manifest.json").is_file()
        assert (r["status"] == "failed") == on_disk
        if on_disk:
            assert read_manifest(out / r["dir"])["status"] == "failed" and r["error"].startswith("terminated")
    assert sorted(p.name for p in (out / "runs").iterdir()) == ["0000", "0001"]  # no staging folder left


def test_one_writer_per_corpus(tmp_path, capsys):
    """While one ``corpus`` holds the folder's lock, a second is refused at once and changes nothing."""
    from hybridsim_common.rundir import locked

    spec, out = _spec(tmp_path), tmp_path / "c"
    assert main(["corpus", str(spec), "-o", str(out), "--no-progress"]) == 0
    before = (out / "corpus.json").read_text()
    capsys.readouterr()
    with locked(tmp_path / ".c.lock", "held by the test"):
        assert main(["corpus", str(spec), "-o", str(out), "--no-progress", "--force"]) == 2
    assert "c is being written by another `hybridsim corpus` (lock" in capsys.readouterr().err
    assert (out / "corpus.json").read_text() == before
    assert main(["corpus", str(spec), "-o", str(out), "--no-progress"]) == 0  # the lock went with its holder


def test_a_corrupt_corpus_json_is_rebuilt_from_the_runs(tmp_path, capsys):
    spec, out = _spec(tmp_path), tmp_path / "c"
    assert main(["corpus", str(spec), "-o", str(out), "--no-progress"]) == 0
    (out / "corpus.json").write_text("[" * 100_000 + "]" * 100_000)
    capsys.readouterr()
    assert main(["corpus", str(spec), "-o", str(out), "--no-progress"]) == 0
    assert "2 runs, 2 already completed, 0 to run" in capsys.readouterr().out
    assert load_corpus(out)["counts"] == {"completed": 2, "failed": 0, "pending": 0}


STREAM_SPEC = SPEC.replace("  background: [0, 0]\n", """\
  background: [0, 1]
  background_ranks: [1, 2]
  stream: {jobs: [5, 7], window: [10000, 50000], walltime: [1.5, 2.5], queue: [easy, fcfs],
           allocation: [random, random-group], share: 1.0}
""").replace("runs: 2", "runs: 6")


def test_stream_draws_are_deterministic_and_within_the_declared_ranges(tmp_path):
    from hybridsim.workloads import ITERATION_TIME_NS

    ls = load_spec(_spec(tmp_path, STREAM_SPEC))
    again = load_spec(_spec(tmp_path, STREAM_SPEC, "again.yaml"))
    draws = [scenario_of(ls, i) for i in range(6)]
    assert [p for _, p in draws] == [scenario_of(again, i)[1] for i in range(6)]
    for sc, p in draws:
        st = p["stream"]
        assert sc.is_stream and sc.scheduler.queue == st["queue"] in ("easy", "fcfs")
        assert sc.scheduler.allocation == st["allocation"] in ("random", "random-group")
        assert 10000 <= st["window"] <= 50000
        jobs = p["jobs"]
        assert 5 <= len(jobs) <= 7
        arrivals = [j["arrival"] for j in jobs]
        assert arrivals[0] == 0.0 and arrivals == sorted(arrivals) and arrivals[-1] <= st["window"]
        held = sum(b["ranks"] for b in p["background"])
        assert held <= 2
        for j in jobs:
            assert 2 <= j["ranks"] <= 12 - held and 2 <= j["iterations"] <= 3
            typical = j["iterations"] * ITERATION_TIME_NS[j["workload"]["kind"]]
            assert 1.5 * typical - 0.1 <= j["walltime"] <= 2.5 * typical + 0.1
        # the scenario carries the draw: arrivals, walltimes, the background with no arrival
        by_name = {j.name: j for j in sc.jobs}
        assert all(by_name[j["name"]].arrival == j["arrival"] and by_name[j["name"]].walltime == j["walltime"]
                   for j in jobs)
        assert all(by_name[b["name"]].arrival == 0 for b in p["background"])
    # more ranks than the 12 terminals hold, in some stream: jobs must queue
    assert any(sum(j["ranks"] for j in p["jobs"]) > 12 for _, p in draws)


def test_stream_share_and_a_spec_without_stream(tmp_path):
    none = load_spec(_spec(tmp_path, STREAM_SPEC.replace("share: 1.0", "share: 0.0"), "none.yaml"))
    assert all("stream" not in scenario_of(none, i)[1] and not scenario_of(none, i)[0].is_stream for i in range(6))
    half = load_spec(_spec(tmp_path, STREAM_SPEC.replace("share: 1.0", "share: 0.5").replace("runs: 6", "runs: 20"),
                           "half.yaml"))
    kinds = [scenario_of(half, i)[0].is_stream for i in range(20)]
    assert 0 < sum(kinds) < 20


@pytest.mark.parametrize("edit, where, msg", [
    (("window: [10000, 50000]", "window: [50000, 10000]"), ":19:34: space.stream.window:", "low 50000 > high 10000"),
    (("walltime: [1.5, 2.5]", "walltime: [0, 2.5]"), ":19:60: space.stream.walltime:", "low must be > 0"),
    (("jobs: [5, 7]", "jobs: [0, 7]"), ":19:18: space.stream.jobs:", "at least one foreground job"),
    (("queue: [easy, fcfs]", "queue: [easy, lifo]"), ":19:86: space.stream.queue.1:", "lifo"),
    (("share: 1.0", "share: 1.5"), ":20:55: space.stream.share:", "less than or equal to 1"),
    (("share: 1.0", "shares: 1.0"), ":20:48: space.stream.shares:", "unknown key 'shares'"),
])
def test_stream_spec_errors_name_file_line_and_field(tmp_path, edit, where, msg):
    spec = _spec(tmp_path, STREAM_SPEC.replace(*edit))
    with pytest.raises(CorpusError) as exc:
        load_spec(spec)
    assert f"{spec}{where}" in str(exc.value) and msg in str(exc.value)


def test_a_stream_corpus_runs_and_its_jobs_see_their_co_runners_change(tmp_path):
    from surrogate.pretrain import job_tables

    spec = _spec(tmp_path, STREAM_SPEC.replace("runs: 6", "runs: 2").replace("iterations: [2, 3]",
                                                                            "iterations: [4, 6]"))
    m = build_corpus(spec, tmp_path / "c", progress=False, out=open(os.devnull, "w"))
    assert [r["status"] for r in m["runs"]] == ["completed", "completed"]
    changed = 0
    for r in m["runs"]:
        rm = read_manifest(tmp_path / "c" / r["dir"])
        assert rm["scenario"]["scheduler"]["queue"] == r["params"]["stream"]["queue"]
        for job in job_tables(tmp_path / "c" / r["dir"]):
            changed += int(len(set(job["load"].round(6))) > 1)
    assert changed > 0


def test_moving_72_spec_in_the_repo_draws_streams_outside_the_test_scenarios():
    root = Path(__file__).resolve().parents[1]
    ls = load_spec(root / "corpora" / "moving-72.yaml")
    draws = [scenario_of(ls, i) for i in range(ls.spec.runs)]
    streams = [p for sc, p in draws if sc.is_stream]
    assert len(streams) >= ls.spec.runs // 2
    assert sum(sum(j["ranks"] for j in p["jobs"]) > 72 for p in streams) == len(streams)
    assert len({p["stream"]["allocation"] for p in streams}) == 3
    # no run shares a seed with the 72-node test scenarios and their benches (seeds 1-11)
    assert all(p["seed"] > 11 for _, p in draws)
