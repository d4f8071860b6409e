"""Output directories under hostile and careless use (issue #12): ``--force`` onto the wrong folder, interrupted and
concurrent writers, SIGTERM / SIGHUP, outputs that cannot be written, a closed stdout, reports of unfinished runs.
Signals, pipes and concurrent writers use real ``python -m hybridsim`` subprocesses."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hybridsim_common.backend import Backend
from hybridsim.cli import main
from hybridsim_common.interrupts import Terminated
from hybridsim_common.rundir import RunDir, RunDirError, StagedDir
from hybridsim.runner import RunError, run_scenario
from hybridsim.scenario import parse_scenario
from refdata import CODES

REPO = Path(__file__).resolve().parents[1]
ENV = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""), OMP_NUM_THREADS="1",
           HF_HUB_OFFLINE="1")
TOPO = "topology: {groups: 9, routers_per_group: 4, terminals_per_router: 2, global_channels_per_router: 2}\n"
#: runs in well under a second
TINY = TOPO + "jobs:\n  - {name: %s, ranks: 4, iterations: 3, workload: {kind: allreduce, size: 1024}}\n"
#: would run for minutes: only ever ended by a signal
LONG = TOPO + "jobs:\n  - {name: %s, ranks: 8, iterations: 100000, workload: {kind: allreduce, size: 65536}}\n"


def _scenario(d: Path, job: str = "a", text: str = TINY) -> str:
    p = d / f"{job}-{len(text)}.yaml"
    p.write_text(text % job)
    return str(p)


def _run(sc: str, out, *more) -> int:
    return main(["run", sc, "-o", str(out), "--no-progress", *more])


def _manifest(d: Path) -> dict:
    return json.loads((d / "manifest.json").read_text())


def _jobs(d: Path) -> list[str]:
    return list(json.loads((d / "summary.json").read_text())["jobs"])


def _leftovers(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.startswith("."))


def _start(args, cwd) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "hybridsim", *args], cwd=cwd, env=ENV, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _wait_running(pattern_root: Path, pattern: str, proc: subprocess.Popen, timeout: float = 30.0) -> Path:
    """The staging manifest matching ``pattern`` once it says ``running``."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        for m in pattern_root.glob(pattern):
            try:
                if json.loads(m.read_text()).get("status") == "running":
                    return m
            except (OSError, ValueError):
                pass
        if proc.poll() is not None:
            pytest.fail(f"process ended (rc {proc.returncode}) before running: {proc.communicate()[1][-500:]}")
        time.sleep(0.02)
    proc.kill()
    pytest.fail(f"no running manifest {pattern} after {timeout} s")


def _finish(proc: subprocess.Popen, timeout: float = 30.0) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail("process did not end after the signal")
    assert "Traceback" not in err, err
    return proc.returncode, out, err


# ------------------------------------------------------------------------------------------- --force refusals
@pytest.mark.parametrize("case", ["cwd", "parent", "home", "non-run folder", "regular file"])
def test_force_refuses_what_is_not_a_run_and_deletes_nothing(tmp_path, monkeypatch, capsys, case):
    work = tmp_path / "work"
    work.mkdir()
    sc = _scenario(tmp_path)
    (work / "precious.txt").write_text("keep me")
    (tmp_path / "precious.txt").write_text("keep me too")
    monkeypatch.chdir(work)
    home = tmp_path / "home"
    home.mkdir()
    (home / "precious.txt").write_text("x")
    monkeypatch.setenv("HOME", str(home))
    target, why = {"cwd": (".", "working directory"), "parent": ("..", "working directory or one of its parents"),
                   "home": (str(home), "home directory"), "non-run folder": ("precious-dir", "not a hybridsim run"),
                   "regular file": ("precious.txt", "is a file")}[case]
    if case == "non-run folder":
        (work / "precious-dir").mkdir()
        (work / "precious-dir" / "data.csv").write_text("1,2\n")
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    assert _run(sc, target, "--force") == 2
    err = capsys.readouterr().err
    assert f"refusing to replace {target}: " in err and why in err
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before  # nothing deleted, nothing left behind
    assert (work / "precious.txt").read_text() == "keep me"


def test_force_refused_for_bench_dataset_and_checkpoint_onto_foreign_folders(tmp_path, capsys):
    from surrogate.synthetic import make_synthetic_run

    sc = _scenario(tmp_path)
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("x")
    assert main(["bench", sc, "-o", str(foreign), "--force", "--no-progress"]) == 2
    assert "not a hybridsim run directory" in capsys.readouterr().err
    make_synthetic_run(tmp_path / "run", jobs=(("A", "milc", 3, 30),))
    assert main(["dataset", "build", str(tmp_path / "run"), "-o", str(foreign), "--force"]) == 2
    assert f"refusing to replace {foreign}: it is not a hybridsim dataset" in capsys.readouterr().err
    assert main(["dataset", "build", str(tmp_path / "run"), "-o", str(tmp_path / "ds")]) == 0
    assert main(["train", str(tmp_path / "ds"), "--model", "last", "-o", str(foreign)]) == 2
    assert f"refusing to replace {foreign}: it is not a hybridsim checkpoint folder" in capsys.readouterr().err
    assert sorted(p.name for p in foreign.iterdir()) == ["notes.txt"]


# ------------------------------------------------------------------------------------------- replacing a run
def test_force_replaces_a_run_only_when_the_new_one_completes(tmp_path, capsys):
    out = tmp_path / "r"
    assert _run(_scenario(tmp_path, "old"), out) == 0
    assert _run(_scenario(tmp_path, "new"), out) == 2  # no --force
    assert "already exists" in capsys.readouterr().err and _jobs(out) == ["old"]
    # a replacement that fails: the completed run stays, the failed attempt is readable beside it
    old_summary = (out / "summary.json").read_text()

    class Boom(Backend):
        def run(self, **_kw):
            raise RuntimeError("backend died")

    with pytest.raises(RunError, match=f"the completed run in {out} is kept"):
        run_scenario(parse_scenario(TINY % "new"), out, force=True, progress=False, backend=Boom())
    assert (out / "summary.json").read_text() == old_summary and _manifest(out)["status"] == "completed"
    failed = _manifest(tmp_path / "r.failed")
    assert failed["status"] == "failed" and failed["reason"] == "RuntimeError: backend died"
    # a successful replacement
    assert _run(_scenario(tmp_path, "new"), out, "--force") == 0
    assert _jobs(out) == ["new"] and _manifest(out)["status"] == "completed"
    assert _leftovers(tmp_path) == []  # no staging folder, no lock file
    # a failed run replaces a failed one at the same place (nothing good to keep)
    with pytest.raises(RunError):
        run_scenario(parse_scenario(TINY % "x"), tmp_path / "r.failed", force=True, progress=False, backend=Boom())
    assert _manifest(tmp_path / "r.failed")["scenario"]["jobs"][0]["name"] == "x"


def test_memory_error_in_the_failure_handler_still_marks_failed(tmp_path, monkeypatch):
    import hybridsim_common.rundir as rundir

    full_write = rundir.write_json_atomic

    def no_memory_for_failures(path, data):
        if isinstance(data, dict) and data.get("status") == "failed":
            raise MemoryError
        return full_write(path, data)

    monkeypatch.setattr(rundir, "write_json_atomic", no_memory_for_failures)

    class Boom(Backend):
        def run(self, **_kw):
            raise RuntimeError("backend died")

    with pytest.raises(RunError, match="backend died"):
        run_scenario(parse_scenario(TINY % "a"), tmp_path / "r", progress=False, backend=Boom())
    man = _manifest(tmp_path / "r")
    assert man == {"kind": "run-simulate", "status": "failed", "reason": "RuntimeError: backend died",
                   "end_time": man["end_time"]}
    assert _leftovers(tmp_path) == []


# ------------------------------------------------------------------------------------------- signals (subprocesses)
def test_sigterm_during_force_keeps_the_old_run(tmp_path):
    out = tmp_path / "r"
    assert _run(_scenario(tmp_path, "old"), out) == 0
    old = {p.name: p.read_bytes() for p in out.iterdir()}
    proc = _start(["run", _scenario(tmp_path, "new", LONG), "-o", "r", "--force", "--no-progress"], tmp_path)
    _wait_running(tmp_path, ".r.*.partial/manifest.json", proc)
    proc.send_signal(signal.SIGTERM)
    rc, _out, err = _finish(proc)
    assert rc == 128 + signal.SIGTERM == 143
    assert err.strip().splitlines()[-1] == "hybridsim: error: terminated (SIGTERM)"
    assert {p.name: p.read_bytes() for p in out.iterdir()} == old
    failed = _manifest(tmp_path / "r.failed")
    assert failed["status"] == "failed" and failed["reason"] == "terminated (SIGTERM)" and failed["end_time"]
    assert _leftovers(tmp_path) == []


def test_sighup_marks_a_fresh_run_failed(tmp_path):
    proc = _start(["run", _scenario(tmp_path, "a", LONG), "-o", "r", "--no-progress"], tmp_path)
    _wait_running(tmp_path, ".r.*.partial/manifest.json", proc)
    proc.send_signal(signal.SIGHUP)
    rc, _out, err = _finish(proc)
    assert rc == 128 + signal.SIGHUP == 129
    assert err.strip().splitlines()[-1] == "hybridsim: error: terminated (SIGHUP)"
    man = _manifest(tmp_path / "r")
    assert man["status"] == "failed" and man["reason"] == "terminated (SIGHUP)"
    assert not (tmp_path / "r" / "iterations.parquet").exists()
    assert _leftovers(tmp_path) == []


def test_sigterm_during_bench_marks_bench_and_run_failed(tmp_path):
    sc = _scenario(tmp_path, "a", LONG + "surrogate: {model: last}\ncontroller: {policy: periodic}\n")
    proc = _start(["bench", sc, "-o", "b", "--no-progress"], tmp_path)
    _wait_running(tmp_path, ".b.*.partial/.pure.*.partial/manifest.json", proc)
    proc.send_signal(signal.SIGTERM)
    rc, _out, err = _finish(proc)
    assert rc == 143 and err.strip().splitlines()[-1] == "hybridsim: error: terminated (SIGTERM)"
    for d in (tmp_path / "b", tmp_path / "b" / "pure"):
        man = _manifest(d)
        assert man["status"] == "failed" and man["reason"] == "terminated (SIGTERM)"
    assert _manifest(tmp_path / "b")["kind"] == "bench"
    assert _leftovers(tmp_path) == [] and _leftovers(tmp_path / "b") == []


def test_concurrent_force_writers_one_refused(tmp_path):
    out = tmp_path / "r"
    assert _run(_scenario(tmp_path, "old"), out) == 0
    first = _start(["run", _scenario(tmp_path, "ja", LONG), "-o", "r", "--force", "--no-progress"], tmp_path)
    _wait_running(tmp_path, ".r.*.partial/manifest.json", first)
    second = subprocess.run([sys.executable, "-m", "hybridsim", "run", _scenario(tmp_path, "jb"), "-o", "r",
                             "--force", "--no-progress"], cwd=tmp_path, env=ENV, capture_output=True, text=True,
                            timeout=60)
    assert second.returncode == 2 and "Traceback" not in second.stderr
    assert "r is being written by another process" in second.stderr
    first.send_signal(signal.SIGTERM)
    assert _finish(first)[0] == 143
    assert _jobs(out) == ["old"] and _manifest(out)["status"] == "completed"


def test_closed_stdout_ends_quietly(tmp_path):
    from surrogate.synthetic import make_synthetic_run

    make_synthetic_run(tmp_path / "run", jobs=(("A", "milc", 3, 30),))
    assert main(["dataset", "build", str(tmp_path / "run"), "-o", str(tmp_path / "ds")]) == 0
    proc = _start(["dataset", "info", str(tmp_path / "ds")], tmp_path)
    proc.stdout.close()  # the reader is gone before anything is written, as with `| head` once it has its lines
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == 0 and err == ""
    # and through a real shell pipeline into head, pipefail on
    sc = _scenario(tmp_path)
    pipeline = f"set -o pipefail; {sys.executable} -m hybridsim topology {sc} --json | head -1"
    r = subprocess.run(["bash", "-c", pipeline], env=ENV, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout == "{\n" and r.stderr == ""


# ------------------------------------------------------------------------------------------- in-process interruptions
def _raise_sigterm(*_a, **_k):
    signal.raise_signal(signal.SIGTERM)  # a real signal, turned into Terminated by main's handler


def test_interrupted_dataset_build_and_train_keep_the_old_output(tmp_path, monkeypatch, capsys):
    import surrogate.dataset as dataset
    import surrogate.train as train
    from surrogate.synthetic import make_synthetic_run

    make_synthetic_run(tmp_path / "run", jobs=(("A", "milc", 3, 30),))
    make_synthetic_run(tmp_path / "run2", jobs=(("B", "nn", 2, 24),), seed=1)
    ds, ck = tmp_path / "ds", tmp_path / "ck"
    assert main(["dataset", "build", str(tmp_path / "run"), "-o", str(ds)]) == 0
    assert main(["train", str(ds), "--model", "last", "-o", str(ck)]) == 0
    old_ds = {p.name: p.read_bytes() for p in ds.iterdir()}
    old_ck = sorted(str(p.relative_to(ck)) for p in ck.rglob("*"))
    real_save = dataset.SurrogateDataset.save

    def save_then_die(self, path):
        real_save(self, path)
        _raise_sigterm()

    monkeypatch.setattr(dataset.SurrogateDataset, "save", save_then_die)
    assert main(["dataset", "build", str(tmp_path / "run2"), "-o", str(ds), "--force"]) == 143
    assert capsys.readouterr().err.strip() == "hybridsim: error: terminated (SIGTERM)"
    assert {p.name: p.read_bytes() for p in ds.iterdir()} == old_ds
    dataset.load_dataset(ds)  # still verifies
    monkeypatch.setattr(train, "save_checkpoints", _raise_sigterm)
    assert main(["train", str(ds), "--model", "ewma", "-o", str(ck)]) == 143
    assert sorted(str(p.relative_to(ck)) for p in ck.rglob("*")) == old_ck
    assert json.loads((ck / "train.json").read_text())["model"] == "last"
    assert _leftovers(tmp_path) == []
    # the handlers are main's only: outside it SIGTERM is back to what it was
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def _ctrl_c(*_a, **_k):
    raise KeyboardInterrupt


@pytest.mark.parametrize("stop,rc,reason", [(_raise_sigterm, 143, "terminated (SIGTERM)"),
                                            (_ctrl_c, 130, "interrupted (Ctrl-C)")])
def test_interrupted_import_codes_is_marked_failed(tmp_path, monkeypatch, capsys, stop, rc, reason):
    """SIGTERM or Ctrl-C while import-codes writes: the manifest ends failed with the reason, no hidden staging
    folder stays behind (as for runs)."""
    import hybridsim_common.records

    src = CODES / "B-72node-milc" / "hf-seq"
    monkeypatch.setattr(hybridsim_common.records, "write_ports", stop)
    assert main(["import-codes", str(src), "-o", str(tmp_path / "imp")]) == rc
    said = "interrupted" if rc == 130 else reason
    assert capsys.readouterr().err.strip().splitlines()[-1] == f"hybridsim: error: {said}"
    man = _manifest(tmp_path / "imp")
    assert man["kind"] == "codes-import" and man["status"] == "failed" and man["reason"] == reason
    assert man["end_time"] and not (tmp_path / "imp" / "ports.parquet").exists()
    assert _leftovers(tmp_path) == []


def test_a_second_writer_is_refused_while_the_first_holds_the_folder(tmp_path, capsys):
    sc = _scenario(tmp_path)
    held = StagedDir(tmp_path / "r")
    try:
        assert _run(sc, tmp_path / "r") == 2
        assert f"{tmp_path / 'r'} is being written by another process" in capsys.readouterr().err
        with pytest.raises(RunDirError, match="being written by another process"):
            RunDir.create(tmp_path / "r", kind="t", force=True)
    finally:
        held.commit()  # an empty folder lands; a later run may use it
    assert _run(sc, tmp_path / "r") == 0 and _manifest(tmp_path / "r")["status"] == "completed"
    assert _leftovers(tmp_path) == []


# ------------------------------------------------------------------------------------------- unwritable outputs
def _unwritable_cases(tmp_path: Path, base: Path) -> list[tuple[list[str], Path]]:
    from surrogate.synthetic import make_synthetic_run

    sc = _scenario(tmp_path)
    assert _run(sc, tmp_path / "r") == 0
    make_synthetic_run(tmp_path / "run", jobs=(("A", "milc", 3, 30),))
    assert main(["dataset", "build", str(tmp_path / "run"), "-o", str(tmp_path / "ds")]) == 0
    return [(["run", sc, "-o", str(base / "r"), "--no-progress"], base / "r"),
            (["bench", sc, "-o", str(base / "b"), "--no-progress"], base / "b"),
            (["topology", sc, "--write-graph", str(base / "g")], base / "g"),
            (["report", str(tmp_path / "r"), "-o", str(base / "rep")], base / "rep"),
            (["dataset", "build", str(tmp_path / "run"), "-o", str(base / "ds")], base / "ds"),
            (["train", str(tmp_path / "ds"), "--model", "last", "-o", str(base / "ck")], base / "ck")]


def test_outputs_under_a_regular_file_are_clean_errors(tmp_path, capsys):
    blocker = tmp_path / "afile"
    blocker.write_text("not a directory\n")
    capsys.readouterr()
    for argv, out in _unwritable_cases(tmp_path, blocker):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("hybridsim: error: ") and "not a directory" in err.lower(), (argv, err)
        assert str(blocker) in err and not out.exists(), (argv, err)
    assert blocker.read_text() == "not a directory\n"


def test_outputs_in_an_immutable_folder_are_clean_errors(tmp_path, capsys):
    frozen = tmp_path / "frozen"
    frozen.mkdir()
    if shutil.which("chattr") is None or subprocess.run(["chattr", "+i", str(frozen)],
                                                        capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not available here (root ignores chmod, so there is no other read-only folder)")
    try:
        cases = _unwritable_cases(tmp_path, frozen)
        capsys.readouterr()
        for argv, out in cases:
            assert main(argv) == 2, argv
            err = capsys.readouterr().err
            assert err.startswith("hybridsim: error: ") and "Operation not permitted" in err, (argv, err)
            assert str(frozen) in err, (argv, err)
        assert list(frozen.iterdir()) == []
    finally:
        subprocess.run(["chattr", "-i", str(frozen)], check=True)


# ------------------------------------------------------------------------------------------- report warnings
@pytest.mark.parametrize("status,reason", [("running", None), ("failed", "terminated (SIGTERM)")])
def test_report_warns_on_an_unfinished_run(tmp_path, capsys, status, reason):
    run = tmp_path / "r"
    assert _run(_scenario(tmp_path), run) == 0
    man = _manifest(run)
    man.update(status=status, reason=reason)
    (run / "manifest.json").write_text(json.dumps(man))
    capsys.readouterr()
    assert main(["report", str(run)]) == 0
    err = capsys.readouterr().err
    assert f"hybridsim: warning: {run}: manifest status is '{status}'" in err
    assert (reason is None) or f"({reason})" in err
    assert (run / "report" / "iterations-a.png").is_file()


def test_report_of_a_missing_folder_creates_nothing(tmp_path, capsys):
    assert main(["report", str(tmp_path / "nope")]) == 2
    assert "not a run or bench directory" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------------------------------- files a run wrote
def test_a_completed_run_records_its_files_and_their_digests(tmp_path):
    import hashlib

    from hybridsim_common.rundir import verify_digests

    run = tmp_path / "r"
    assert _run(_scenario(tmp_path), run) == 0
    man = _manifest(run)
    on_disk = sorted(p.relative_to(run).as_posix() for p in run.rglob("*") if p.is_file())
    assert man["files"] == [f for f in on_disk if f != "manifest.json"]
    assert "iterations.parquet" in man["files"] and "summary.json" in man["files"]
    for name, digest in man["digest"]["files"].items():
        assert digest == hashlib.sha256((run / name).read_bytes()).hexdigest()
    verify_digests(run)
    raw = bytearray((run / "summary.json").read_bytes())
    raw[raw.index(b"wall_s") + 10] ^= 1  # one bit of the wall time
    (run / "summary.json").write_bytes(bytes(raw))
    with pytest.raises(RunDirError, match="changed since the run completed: summary.json"):
        verify_digests(run)


def test_force_refuses_a_run_holding_files_it_did_not_write(tmp_path, capsys):
    sc = _scenario(tmp_path)
    run = tmp_path / "r"
    assert _run(sc, run) == 0
    assert main(["report", str(run)]) == 0  # hybridsim's own plots do not count as foreign
    (run / "my-notes.txt").write_text("keep me")
    (run / "analysis").mkdir()
    (run / "analysis" / "fit.csv").write_text("1,2\n")
    capsys.readouterr()
    assert _run(sc, run, "--force") == 2
    err = capsys.readouterr().err
    assert "holds files hybridsim did not write: analysis/fit.csv, my-notes.txt" in err
    assert (run / "my-notes.txt").read_text() == "keep me" and (run / "analysis" / "fit.csv").is_file()
    assert _leftovers(tmp_path) == []
    # the same for a bench directory
    assert main(["bench", sc, "-o", str(tmp_path / "b"), "--no-progress"]) == 0
    (tmp_path / "b" / "pure" / "mine.txt").write_text("x")
    assert main(["bench", sc, "-o", str(tmp_path / "b"), "--no-progress", "--force"]) == 2
    assert "pure/mine.txt" in capsys.readouterr().err and (tmp_path / "b" / "pure" / "mine.txt").is_file()
    # with the user's files moved out, --force replaces the run (its report plots with it)
    (run / "my-notes.txt").unlink()
    shutil.rmtree(run / "analysis")
    assert _run(sc, run, "--force") == 0
    assert not (run / "report").exists()


def test_force_on_a_run_written_before_runs_listed_their_files(tmp_path, capsys):
    """No ``files`` in the manifest: hybridsim's own file names (and report plots) are known, anything else is not."""
    sc = _scenario(tmp_path)
    run = tmp_path / "r"
    assert _run(sc, run) == 0
    man = _manifest(run)
    del man["files"]
    (run / "manifest.json").write_text(json.dumps(man))
    (run / "report").mkdir()
    (run / "report" / "iterations-a.png").write_bytes(b"png")
    (run / "report" / "todo.txt").write_text("mine")
    capsys.readouterr()
    assert _run(sc, run, "--force") == 2
    assert "did not write: report/todo.txt" in capsys.readouterr().err
    (run / "report" / "todo.txt").unlink()
    assert _run(sc, run, "--force") == 0


# ------------------------------------------------------------------------------------------- report, describe-run
def test_report_does_not_follow_links_out_of_the_run(tmp_path, capsys):
    run = tmp_path / "r"
    assert _run(_scenario(tmp_path), run) == 0
    outside = tmp_path / "outside"
    outside.mkdir()
    (run / "report").symlink_to(outside)
    capsys.readouterr()
    assert main(["report", str(run)]) == 2
    assert "report: a symbolic link" in capsys.readouterr().err
    assert list(outside.iterdir()) == []
    # a link at one of the plots is replaced by the plot, its target left alone
    (run / "report").unlink()
    (run / "report").mkdir()
    victim = outside / "victim.txt"
    victim.write_text("precious")
    (run / "report" / "iterations-a.png").symlink_to(victim)
    assert main(["report", str(run)]) == 0
    assert victim.read_text() == "precious"
    png = run / "report" / "iterations-a.png"
    assert not png.is_symlink() and png.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("text, msg", [
    (b"\x00\xff not json", "corrupt manifest.json: not UTF-8"),
    (b"{\"status\": ", "corrupt manifest.json: Expecting value"),
    (b"[1, 2]", "a JSON object expected, not list"),
    (b"[" * 100_000 + b"]" * 100_000, "nested too deep"),
    (b'{"status": "completed", "scenario": [1]}', "no resolved 'scenario'"),
    (b'{"status": "completed", "scenario": {"jobs": "x"}}', "does not validate here"),
])
def test_describe_run_on_a_garbage_manifest_is_a_clean_error(tmp_path, capsys, text, msg):
    d = tmp_path / "r"
    d.mkdir()
    (d / "manifest.json").write_bytes(text)
    assert main(["describe-run", str(d)]) == 2
    assert msg in capsys.readouterr().err
    assert sorted(p.name for p in d.iterdir()) == ["manifest.json"]


def test_describe_run_imports_no_workload_a_manifest_names(tmp_path, monkeypatch, capsys):
    """A foreign manifest naming a ``custom`` workload beside an importable module of that name: describe-run
    describes the run without importing it (the job's volumes unknown)."""
    run = tmp_path / "r"
    assert _run(_scenario(tmp_path), run) == 0
    man = _manifest(run)
    man["scenario"]["jobs"][0]["workload"] = {"kind": "custom", "function": "evil_wl_21:fn", "params": {}}
    (run / "manifest.json").write_text(json.dumps(man))
    (run / "description.json").unlink()
    (tmp_path / "evil_wl_21.py").write_text("import pathlib\npathlib.Path(__file__).with_name('IMPORTED').touch()\n"
                                            "def fn(rank, iteration, n_ranks):\n    return []\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["describe-run", str(run)]) == 0
    assert not (tmp_path / "IMPORTED").exists() and "evil_wl_21" not in sys.modules
    job = json.loads((run / "description.json").read_text())["jobs"][0]
    assert job["workload"] == "custom" and job["volumes"] is None and job["terminals"] is not None


def test_describe_run_force_keeps_the_digests_true(tmp_path):
    from hybridsim_common.rundir import verify_digests

    run = tmp_path / "r"
    assert _run(_scenario(tmp_path), run) == 0
    desc = json.loads((run / "description.json").read_text())
    desc["jobs"][0]["volumes"] = None
    (run / "description.json").write_text(json.dumps(desc))
    with pytest.raises(RunDirError, match="description.json"):
        verify_digests(run)
    assert main(["describe-run", str(run), "--force"]) == 0
    verify_digests(run)
    assert json.loads((run / "description.json").read_text())["jobs"][0]["volumes"] is not None


# ------------------------------------------------------------------ report on broken directories (issue 35, item 6)
def _garble_table(d: Path) -> None:
    p = d / "iterations.parquet"
    p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 2])  # half-written


def _columns_gone(d: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"x": [1, 2]}), d / "iterations.parquet")


BROKEN_RUNS = {
    "table half-written": _garble_table,
    "table of random bytes": lambda d: (d / "iterations.parquet").write_bytes(os.urandom(4096)),
    "table without its columns": _columns_gone,
    "summary not JSON": lambda d: (d / "summary.json").write_text("{\"jobs\": "),
    "summary a list": lambda d: (d / "summary.json").write_text("[1, 2]"),
    "ports of random bytes": lambda d: (d / "ports.parquet").write_bytes(os.urandom(2048)),
}


@pytest.mark.parametrize("name", sorted(BROKEN_RUNS))
def test_report_refuses_a_broken_run_directory(tmp_path, capsys, name):
    sc = _scenario(tmp_path)
    d = tmp_path / "r"
    assert _run(sc, d) == 0
    BROKEN_RUNS[name](d)
    capsys.readouterr()
    rc = main(["report", str(d), "-o", str(tmp_path / "rep")])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert str(d) in err and "Traceback" not in err, err


BROKEN_BENCHES = {
    "bench.json not JSON": "{\"runs\": [",
    "bench.json a list": "[]",
    "runs not a list": "{\"runs\": 3}",
    "a run without its fields": "{\"runs\": [{\"run\": \"x\"}]}",
    "a run of the wrong types": "{\"runs\": [{\"run\": 1, \"speedup\": \"fast\", \"max_completion_error_pct\": []}]}",
}


@pytest.mark.parametrize("name", sorted(BROKEN_BENCHES))
def test_report_refuses_a_broken_bench_directory(tmp_path, capsys, name):
    d = tmp_path / "b"
    d.mkdir()
    (d / "bench.json").write_text(BROKEN_BENCHES[name])
    rc = main(["report", str(d), "-o", str(tmp_path / "rep")])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert str(d) in err and "Traceback" not in err, err


@pytest.mark.parametrize("name", ["iterations.parquet", "summary.json", "bench.json", "manifest.json"])
def test_report_refuses_a_fifo_without_blocking(tmp_path, name):
    sc = _scenario(tmp_path)
    d = tmp_path / "r"
    assert _run(sc, d) == 0
    if name == "bench.json":
        for p in d.iterdir():
            if p.is_file():
                p.unlink()
    else:
        (d / name).unlink()
    os.mkfifo(d / name)
    if name == "manifest.json":  # the status line reads it: a FIFO there must not block either
        (d / "summary.json").unlink()
    r = subprocess.run([sys.executable, "-m", "hybridsim", "report", str(d), "-o", str(tmp_path / "rep")],
                       env=ENV, capture_output=True, text=True, timeout=60)
    assert r.returncode in (0, 2) and "Traceback" not in r.stderr, r.stderr
    assert "not a regular file" in r.stderr, r.stderr


# --------------------------------------------------------------------------- corpus.json (issue 35, item 10)
def test_a_random_corpus_json_does_not_make_a_corpus(tmp_path, capsys):
    from hybridsim_common.rundir import RunDirError, load_corpus_index

    folder = tmp_path / "c"
    folder.mkdir()
    (folder / "corpus.json").write_text(json.dumps({"runs": [{"id": 0, "dir": "runs/0000"}]}))
    (folder / "notes.txt").write_text("mine")
    with pytest.raises(RunDirError, match="not a corpus index written by"):
        load_corpus_index(folder / "corpus.json")
    spec = tmp_path / "spec.yaml"
    spec.write_text("name: t\nseed: 1\nruns: 1\nspace:\n  topology:\n    - {groups: 3, routers_per_group: 2, "
                    "terminals_per_router: 2, global_channels_per_router: 1}\n  ranks: [2, 2]\n"
                    "  iterations: [2, 2]\n  workloads: [allreduce]\n")
    rc = main(["corpus", str(spec), "-o", str(folder), "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 2 and "not a corpus" in err, err
    assert sorted(p.name for p in folder.iterdir()) == ["corpus.json", "notes.txt"]
