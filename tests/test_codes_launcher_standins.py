"""The CODES launcher with stand-in executables: one that replays reference run B's output files, and ones that fail
in each way (missing, exit 1, killed by a signal, hanging past the timeout). No CODES run is pretended: the stand-in
is a real process that checks its command line and input files and writes the files CODES would write."""

from __future__ import annotations

import json
import os
import signal
import stat
import sys
from pathlib import Path

import pytest

from codes_bridge.launcher import STDERR_NAME, STDOUT_NAME, CodesRunError, run_inputs
from codes_bridge.writers import write_codes_inputs
from hybridsim.scenario import Scenario

REPLAY = """
import json, os, shutil, sys
ref = {ref!r}
args = sys.argv[1:]
sep = args.index("--")
opts = dict(a.partition("=")[::2] for a in args[:sep])
for key in ("--workload_conf_file", "--alloc_file"):
    assert os.path.isfile(opts[key]), "missing input " + opts[key]
conf = args[sep + 1]
assert os.path.isfile(conf), "missing conf " + conf
text = open(conf).read()
for line in text.splitlines():
    if "group-connections" in line:
        assert os.path.isfile(line.split('"')[1]), line
json.dump({{"argv": sys.argv, "np_env": os.environ.get("STANDIN_NP")}}, open("standin-argv.json", "w"))
for name in ("iteration-logs", "lp-io", "ross-stats-decoded", "ross_all_lp_stats"):
    if os.path.isdir(os.path.join(ref, name)):
        shutil.copytree(os.path.join(ref, name), name)
shutil.copy(os.path.join(ref, "ross.csv"), "ross.csv")
sys.stdout.write(open(os.path.join(ref, "model-output.txt")).read())
sys.stderr.write(open(os.path.join(ref, "model-output.stderr.txt")).read())
"""

FAIL_EXIT = """
import os, sys
os.makedirs("iteration-logs", exist_ok=True)
open("iteration-logs/pe=0.txt", "w").write("ITERATION 0 node 0 job 0 rank 0 time 1000.0\\n")
for i in range(30):
    print(f"stderr line {i}", file=sys.stderr)
print("tw_error: Predictor for node was not initialized", file=sys.stderr)
sys.exit(1)
"""

CRASH = """
import os, signal, sys
print("about to crash", file=sys.stderr, flush=True)
open("partial.txt", "w").write("partial output")
os.kill(os.getpid(), signal.SIGSEGV)
"""

HANG = """
import sys, time
print("started, now hanging", file=sys.stderr, flush=True)
open("hang-started.txt", "w").write("x")
time.sleep(300)
"""

MPIRUN = """
import os, sys
args = sys.argv[1:]
if args[0] == "--launcher-flag":
    open("launcher-flag.txt", "w").write("seen")
    args = args[1:]
assert args[0] == "-np", args
os.environ["STANDIN_NP"] = args[1]
open("mpirun-np.txt", "w").write(args[1])
os.execv(args[2], args[2:])
"""


def _script(path: Path, body: str) -> Path:
    path.write_text(f"#!{sys.executable}\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def _scenario(bin_dir: Path | None, mpirun: str, synch="sequential", np_=1, timeout=None) -> Scenario:
    codes = {"synch": synch, "np": np_, "mpirun": mpirun}
    if bin_dir is not None:
        codes["bin_dir"] = str(bin_dir)
    if timeout is not None:
        codes["timeout"] = timeout
    return Scenario.model_validate({
        "topology": dict(groups=9, routers_per_group=4, terminals_per_router=2, global_channels_per_router=2),
        "jobs": [{"name": "milc", "ranks": 72, "iterations": 20,
                  "workload": {"kind": "milc", "dimension_sizes": [2, 2, 3, 6], "msg_size": 65536}}],
        "sampling": {"interval": "50us"},
        "backend": {"kind": "codes", "codes": codes},
    })


@pytest.fixture
def bins(tmp_path):
    b = tmp_path / "bin"
    b.mkdir()
    mpirun = _script(b / "mpirun", MPIRUN)
    return b, str(mpirun)


def _inputs(sc, tmp_path):
    return write_codes_inputs(sc, tmp_path / "run" / "codes", vt_samp_end=1e7)


def test_replay_sequential_streams_output(bins, tmp_path, codes_data):
    b, mpirun = bins
    ref = codes_data / "B-72node-milc" / "hf-seq"
    _script(b / "model-net-mpi-replay", REPLAY.format(ref=str(ref)))
    sc = _scenario(b, mpirun)
    inputs = _inputs(sc, tmp_path)
    seen = []
    res = run_inputs(sc, inputs, progress=seen.append)
    d = inputs.dir
    assert res.returncode == 0
    assert (d / STDOUT_NAME).read_text() == (ref / "model-output.txt").read_text()
    assert (d / STDERR_NAME).read_text() == (ref / "model-output.stderr.txt").read_text()
    assert len(seen) == len((ref / "model-output.txt").read_text().splitlines())
    assert (d / "iteration-logs" / "pe=0.txt").read_bytes() == (ref / "iteration-logs" / "pe=0.txt").read_bytes()
    argv = json.loads((d / "standin-argv.json").read_text())["argv"]
    assert argv[0] == str((b / "model-net-mpi-replay").resolve())
    assert "--synch=1" in argv and (d / "mpirun-np.txt").read_text() == "1"
    assert (d / "command.txt").read_text().startswith(f"{mpirun} -np 1 ")


def test_optimistic_uses_np_ranks_and_synch3(bins, tmp_path, codes_data):
    b, mpirun = bins
    _script(b / "model-net-mpi-replay", REPLAY.format(ref=str(codes_data / "B-72node-milc" / "hf-opt-np2")))
    sc = _scenario(b, mpirun + " --launcher-flag", synch="optimistic", np_=4)
    sc.backend.codes.extra_args = ["--extramem=300000", "--end=20000000"]
    inputs = _inputs(sc, tmp_path)
    run_inputs(sc, inputs, progress=False)
    d = inputs.dir
    assert (d / "mpirun-np.txt").read_text() == "4"
    assert (d / "launcher-flag.txt").read_text() == "seen"
    argv = json.loads((d / "standin-argv.json").read_text())["argv"]
    assert "--synch=3" in argv and "--extramem=300000" in argv and "--extramem=200000" not in argv
    assert argv.index("--end=20000000") < argv.index("--")


def test_bin_dir_from_environment(bins, tmp_path, codes_data):
    b, mpirun = bins
    _script(b / "model-net-mpi-replay", REPLAY.format(ref=str(codes_data / "B-72node-milc" / "hf-seq")))
    sc = _scenario(None, mpirun)
    inputs = _inputs(sc, tmp_path)
    env = dict(os.environ, CODES_BIN_DIR=str(b))
    assert run_inputs(sc, inputs, env=env).returncode == 0
    with pytest.raises(CodesRunError, match="CODES_BIN_DIR") as ei:
        run_inputs(sc, inputs, env={k: v for k, v in os.environ.items() if k != "CODES_BIN_DIR"})
    assert ei.value.cause == "missing-binary"


def test_missing_binary(bins, tmp_path):
    b, mpirun = bins
    sc = _scenario(b, mpirun)
    with pytest.raises(CodesRunError, match="model-net-mpi-replay' not found") as ei:
        run_inputs(sc, _inputs(sc, tmp_path))
    assert ei.value.cause == "missing-binary"


def test_direct_start_without_mpirun(bins, tmp_path, codes_data):
    b, _ = bins
    _script(b / "model-net-mpi-replay", REPLAY.format(ref=str(codes_data / "B-72node-milc" / "hf-seq")))
    sc = _scenario(b, "")
    inputs = _inputs(sc, tmp_path)
    run_inputs(sc, inputs)
    assert not (inputs.dir / "mpirun-np.txt").exists() and (inputs.dir / "ross.csv").is_file()
    with pytest.raises(CodesRunError, match="only works for a sequential run") as ei:
        run_inputs(_scenario(b, "", synch="optimistic", np_=2), inputs)
    assert ei.value.cause == "bad-config"


def test_missing_mpirun(bins, tmp_path):
    b, _ = bins
    _script(b / "model-net-mpi-replay", FAIL_EXIT)
    sc = _scenario(b, "no-such-mpirun-xyz")
    with pytest.raises(CodesRunError, match="no-such-mpirun-xyz") as ei:
        run_inputs(sc, _inputs(sc, tmp_path))
    assert ei.value.cause == "missing-mpirun"


def test_nonzero_exit_quotes_stderr_tail_and_keeps_files(bins, tmp_path):
    b, mpirun = bins
    _script(b / "model-net-mpi-replay", FAIL_EXIT)
    sc = _scenario(b, mpirun)
    inputs = _inputs(sc, tmp_path)
    with pytest.raises(CodesRunError) as ei:
        run_inputs(sc, inputs)
    e = ei.value
    assert e.cause == "exit" and e.returncode == 1
    msg = str(e)
    assert "exited with status 1" in msg and "Predictor for node was not initialized" in msg
    assert "stderr line 29" in msg and "stderr line 5\n" not in msg  # only the last lines
    assert (inputs.dir / "iteration-logs" / "pe=0.txt").is_file()
    assert "stderr line 0" in (inputs.dir / STDERR_NAME).read_text()


def test_crash_by_signal(bins, tmp_path):
    b, mpirun = bins
    _script(b / "model-net-mpi-replay", CRASH)
    sc = _scenario(b, mpirun)
    inputs = _inputs(sc, tmp_path)
    with pytest.raises(CodesRunError, match="SIGSEGV") as ei:
        run_inputs(sc, inputs)
    assert ei.value.cause == "signal" and ei.value.returncode == -signal.SIGSEGV
    assert "about to crash" in str(ei.value)
    assert (inputs.dir / "partial.txt").read_text() == "partial output"


def test_timeout_stops_codes(bins, tmp_path):
    b, mpirun = bins
    _script(b / "model-net-mpi-replay", HANG)
    sc = _scenario(b, mpirun, timeout="1s")
    inputs = _inputs(sc, tmp_path)
    with pytest.raises(CodesRunError, match="timed out") as ei:
        run_inputs(sc, inputs)
    assert ei.value.cause == "timeout" and "now hanging" in str(ei.value)
    assert (inputs.dir / "hang-started.txt").is_file()


def test_timeout_without_unit_is_refused(bins, tmp_path):
    b, mpirun = bins
    _script(b / "model-net-mpi-replay", HANG)
    sc = _scenario(b, mpirun, timeout=3600)  # 3600 ns: almost surely meant seconds
    with pytest.raises(CodesRunError, match="write a unit") as ei:
        run_inputs(sc, _inputs(sc, tmp_path))
    assert ei.value.cause == "bad-config"


# ------------------------------------------------------------------------------------------------------ run_codes
def test_run_codes_replay_gives_reference_results(bins, tmp_path, codes_data):
    """The whole backend: inputs written, stand-in CODES run, outputs imported. Expected figures from run B's
    README: 72 ranks x 20 iterations, MILC job time 8,843,603.86 ns, 6,348,763 net events."""
    from codes_bridge.backend import run_codes

    b, mpirun = bins
    _script(b / "model-net-mpi-replay", REPLAY.format(ref=str(codes_data / "B-72node-milc" / "hf-seq")))
    sc = _scenario(b, mpirun)
    res = run_codes(sc, tmp_path / "run", progress=False, vt_samp_end=1e7)
    assert not res.partial
    assert len(res.records) == 72 * 20 and all(res.simulated)
    assert {r.job for r in res.records} == {"milc"}
    assert {r.iteration for r in res.records} == set(range(20))
    assert res.job_end["milc"] == pytest.approx(8_843_603.86, abs=0.01)
    assert res.end_time == pytest.approx(8_843_603.86, abs=0.01)
    assert res.events == 6_348_763
    assert res.ports is not None and res.ports.radix == 7 and res.ports.n_ports == 36 * 7
    assert res.ports.interval == 50_000
    assert (tmp_path / "run" / "codes" / "dfdally-72.conf").is_file()


def test_run_codes_failure_keeps_files_and_says_why(bins, tmp_path):
    from codes_bridge.backend import run_codes

    b, mpirun = bins
    _script(b / "model-net-mpi-replay", FAIL_EXIT)
    with pytest.raises(CodesRunError, match="exited with status 1") as ei:
        run_codes(_scenario(b, mpirun), tmp_path / "run", progress=False)
    assert ei.value.run_dir == (tmp_path / "run" / "codes").resolve()
    assert (tmp_path / "run" / "codes" / "iteration-logs" / "pe=0.txt").is_file()


def test_run_codes_exit_zero_without_finishing_is_an_error(bins, tmp_path):
    from codes_bridge.backend import run_codes

    b, mpirun = bins
    _script(b / "model-net-mpi-replay", "import sys\nprint('hello')\nprint('setup done', file=sys.stderr)\n")
    with pytest.warns(Warning):
        with pytest.raises(CodesRunError, match="did not finish") as ei:
            run_codes(_scenario(b, mpirun), tmp_path / "run", progress=False)
    assert ei.value.cause == "no-output" and "setup done" in str(ei.value)


def test_run_summary_takes_completion_times_from_codes(bins, tmp_path, codes_data):
    """``hybridsim run`` on the CODES backend: summary.json's completion times are the ones CODES printed ("Per App
    Max Elapsed Times"), also for the nearest-neighbour job, which writes no iteration marks (run C's stand-in)."""
    import warnings

    from codes_bridge.parsers.common import CodesWarning
    from codes_bridge.scenario_from_codes import scenario_from_codes
    from hybridsim.runner import run_scenario
    from hybridsim.scenario import scenario_to_dict

    ref = codes_data / "C-1056node-milc-lammps-nn" / "netsurr-fixed-random-seq"
    b, mpirun = bins
    _script(b / "model-net-mpi-replay", REPLAY.format(ref=str(ref)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CodesWarning)
        d = scenario_to_dict(scenario_from_codes(ref))
        d["backend"] = {"kind": "codes", "codes": {"bin_dir": str(b), "mpirun": mpirun}}
        d["sampling"] = {"interval": "250us", "ports": False}
        _, res, summary = run_scenario(Scenario.model_validate(d), tmp_path / "run", progress=False)
    jobs = summary["jobs"]
    assert jobs["nn-256"]["completion_time_ns"] == 582656.9278
    assert jobs["milc-512"]["completion_time_ns"] == res.job_end["milc-512"] == 2602465.4231
    assert jobs["lammps-256"]["completion_time_ns"] == 12351469.9896
    assert jobs["milc-512"]["iterations_recorded"] == 512 * 6
