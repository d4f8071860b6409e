"""Hybrid runs on the CODES backend (codes_bridge.hybrid): the scenario's policy as CODES' director window(s), the
DIRECTOR section and director LPs written, and the in-process director server started for CODES and stopped after
it. CODES is replaced by a stand-in that speaks CODES' director protocol to ``ZMQML_ENDPOINT`` (ZeroMQ REQ on
127.0.0.1, as CODES' client does) and then replays reference run B's output files."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from codes_bridge.hybrid import (STANDIN_BANNER, STANDIN_BANNERS, choose_windows, director_section, plan_director,
                                 policy_plan)
from codes_bridge.writers import parse_conf
from hybridsim_common.backend import Mode
from hybridsim.scenario import Scenario

from test_codes_launcher_standins import FAIL_EXIT, REPLAY, _script, bins  # noqa: F401  (fixture)

S, P = Mode.SIMULATE, Mode.PREDICT


def _modes(text: str) -> list[Mode]:
    return [P if c == "P" else S for c in text]


# ---------------------------------------------------------------------------------------------- window choice
def test_windows_single_job_follow_the_policy_exactly():
    assert choose_windows([_modes("S" * 8 + "P" * 12)]) == [(8, 20)]
    assert choose_windows([_modes("S" * 20)]) == []
    # SMART's periodic schedule has three predicted stretches; with two windows, predicting the truth iteration 15
    # (1 pair off the plan) beats leaving a stretch simulated (3 pairs)
    assert choose_windows([_modes("SSSSSSSSPPPSPPPSPPPS")]) == [(8, 11), (12, 19)]


def test_windows_start_no_earlier_than_codes_can_switch():
    # CODES switches a rank once it has sent iteration times: iteration 6 at the earliest
    assert choose_windows([_modes("S" + "P" * 19)]) == [(6, 20)]
    assert choose_windows([_modes("SPPPSS")]) == []


def test_windows_avoid_the_phantom_iteration_of_a_job_ending_inside_a_window():
    """MILC 20 and LAMMPS 10 iterations, both predicted from 8 on: one window [8, 20) would leave LAMMPS' last mark
    inside it, and CODES would add a predicted iteration to LAMMPS; ending the first window with LAMMPS costs only
    MILC's iteration 10 (simulated)."""
    assert choose_windows([_modes("S" * 8 + "P" * 12), _modes("S" * 8 + "PP")]) == [(8, 10), (11, 20)]


def test_windows_never_open_at_a_job_s_last_mark():
    """MILC 20 iterations predicted from 8, LAMMPS 10 simulated throughout: a window [10, 20) writes start_iter = 9,
    LAMMPS' last mark, so CODES would switch LAMMPS there and add a predicted iteration before it ends (a phantom:
    measured +9.1 % on the live scenario). The window opens one iteration later, MILC's 8-10 simulated instead."""
    assert choose_windows([_modes("S" * 8 + "P" * 12), _modes("S" * 10)]) == [(11, 20)]
    # a job of 9: [8, 20) would both predict its iteration 8 and switch it at its last mark; [10, 20) does neither
    assert choose_windows([_modes("S" * 8 + "P" * 12), _modes("S" * 9)]) == [(10, 20)]
    # a job of 7 ends before the window's start mark (7): untouched
    assert choose_windows([_modes("S" * 8 + "P" * 12), _modes("S" * 7)]) == [(8, 20)]


def test_policy_plan_dry_run():
    sc = _scenario(None, "mpirun", controller={"policy": "periodic", "params": {"warmup": 8, "ft": 4, "truth": 1}})
    assert policy_plan(sc) == [_modes("SSSSSSSSPPPSPPPSPPPS")]
    plan = plan_director(sc)
    assert plan.windows == [(8, 11), (12, 19)] and plan.mismatch == {"milc": [15]}


def test_plan_never_predicts_a_job_without_iteration_marks():
    """SWM nearest_neighbor writes no iteration marks: CODES cannot skip its iterations, so the plan simulates them
    (the policy is still asked), the windows follow the jobs CODES can predict (MILC alone: exactly its plan) and
    nothing reports the NN job as predicted or as off the plan."""
    sc = Scenario.model_validate({
        "topology": dict(groups=9, routers_per_group=4, terminals_per_router=2, global_channels_per_router=2),
        "jobs": [{"name": "milc", "ranks": 36, "iterations": 20,
                  "workload": {"kind": "milc", "dimension_sizes": [2, 2, 3, 3], "msg_size": 65536}},
                 {"name": "nn", "ranks": 8, "iterations": 20,
                  "workload": {"kind": "nearest_neighbor", "dimension_sizes": [2, 2, 2], "msg_size": 4096}}],
        "backend": {"kind": "codes"},
        "controller": {"policy": "periodic", "params": {"warmup": 8, "ft": 4, "truth": 1}}})
    plan = plan_director(sc)
    assert plan.plan == [_modes("SSSSSSSSPPPSPPPSPPPS"), _modes("S" * 20)]
    assert plan.windows == [(8, 11), (12, 19)]
    assert plan.mismatch == {"milc": [15], "nn": []}
    assert list(plan.unpredictable) == ["nn"] and "no iteration marks" in plan.unpredictable["nn"]
    desc = plan.describe()
    assert desc["policy_predicted"] == {"0": 9, "1": 0} and list(desc["never_predicted"]) == ["nn"]
    from codes_bridge.backend import CodesBackend

    assert list(CodesBackend.never_predicted(sc)) == ["nn"]


def test_optimistic_hybrid_on_codes_is_refused_before_any_run_directory(tmp_path):
    """Optimistic CODES asks its director before the records commit and again after rollbacks: hybrid mode is
    refused (exit 2, located, the reason given) and nothing is written; validate names it as a note."""
    import subprocess
    import sys

    f = tmp_path / "opt.yaml"
    f.write_text("topology: {groups: 9, routers_per_group: 4, terminals_per_router: 2, global_channels_per_router: 2}\n"
                 "jobs:\n"
                 "  - {name: milc, ranks: 8, iterations: 20, workload: {kind: milc, dimension_sizes: [2, 2, 2]}}\n"
                 "  - {name: nn, ranks: 8, iterations: 20, workload: {kind: nearest_neighbor, dimension_sizes: [2, 2, 2]}}\n"
                 "backend: {kind: codes, codes: {synch: optimistic, np: 2}}\n")
    run = subprocess.run([sys.executable, "-m", "hybridsim", "run", str(f), "--mode", "hybrid", "-o",
                          str(tmp_path / "out")], capture_output=True, text=True, cwd=tmp_path)
    assert run.returncode == 2, run.stderr
    assert f"{f}:5:" in run.stderr and "synch: optimistic" in run.stderr and "sequential" in run.stderr
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out*"))
    val = subprocess.run([sys.executable, "-m", "hybridsim", "validate", str(f)], capture_output=True, text=True)
    assert val.returncode == 0, val.stderr
    notes = [ln for ln in val.stderr.splitlines() if ": note: " in ln]
    assert len(notes) == 2 and "--mode hybrid is refused" in notes[0] and "job 'nn' is never predicted" in notes[1]


def test_director_section_without_window_never_opens_one():
    """The perturbation floor's run (run_codes mode='floor'): director LPs, records sent, but a window at CODES' own
    never-reached default, so nothing is predicted."""
    sec = director_section([])
    assert (sec["start_iter"], sec["end_iter"]) == ("100000", "100001") and "second_start_iter" not in sec
    assert sec["surrogate_enabled"] == sec["training_enabled"] == sec["inferencing_enabled"] == "1"
    with pytest.raises(ValueError, match="at most 2 windows"):
        director_section([(6, 7), (8, 9), (10, 11)])


def test_director_section_numbering():
    """Predicted iterations [a, b) are CODES marks start_iter = a - 1 .. end_iter = b - 1."""
    sec = director_section([(8, 10), (11, 20)])
    assert (sec["start_iter"], sec["end_iter"]) == ("7", "9")
    assert (sec["second_surrogate_enabled"], sec["second_start_iter"], sec["second_end_iter"]) == ("1", "10", "19")
    assert sec["training_enabled"] == sec["inferencing_enabled"] == sec["surrogate_enabled"] == "1"
    assert sec["shutdown_zmqml_server_on_finalize"] == "0"
    assert "second_start_iter" not in director_section([(8, 20)])


# ---------------------------------------------------------------------------------------------- stand-in CODES
#: CODES' director client in a few lines: set-debug, records for two clients, one inference each, as a5958cfa sends
#: them ("2;client;n;" args, NUL, space-separated values); the replies are kept for the test.
DIRECTOR_CLIENT = """
import json, os, zmq
conf = open(args[sep + 1]).read()
ctx = zmq.Context()
sock = ctx.socket(zmq.REQ)
sock.setsockopt(zmq.RCVTIMEO, 20000)
sock.setsockopt(zmq.LINGER, 0)
sock.connect(os.environ["ZMQML_ENDPOINT"])
def req(cmd, data=""):
    sock.send(json.dumps(cmd).encode() + b"\\0" + data.encode())
    return json.loads(sock.recv())
replies = [req({{"cmd": "set-debug", "args": ["1", "0"]}})]
for client, times in ((0, "360000 365000 370000 362000 361000"), (1, "2100000 2110000 2090000 2105000 2095000")):
    replies.append(req({{"cmd": "director-request", "surrogate_family": "iteration-time",
                        "surrogate_backend": "hybridsim", "operation": "send-records",
                        "args": ["2", str(client), "5"]}}, times))
for client in (0, 1):
    replies.append(req({{"cmd": "director-request", "surrogate_family": "iteration-time",
                        "surrogate_backend": "hybridsim", "operation": "inference", "args": ["2", str(client), "1"]}}))
json.dump({{"endpoint": os.environ["ZMQML_ENDPOINT"], "replies": replies}}, open("director-replies.json", "w"))
"""


def _scenario(bin_dir: Path | None, mpirun: str, controller=None, surrogate=None) -> Scenario:
    codes = {"mpirun": mpirun, "timeout": "120s"}
    if bin_dir is not None:
        codes["bin_dir"] = str(bin_dir)
    d = {
        "topology": dict(groups=9, routers_per_group=4, terminals_per_router=2, global_channels_per_router=2),
        "jobs": [{"name": "milc", "ranks": 72, "iterations": 20,
                  "workload": {"kind": "milc", "dimension_sizes": [2, 2, 3, 6], "msg_size": 65536}}],
        "sampling": {"interval": "50us"},
        "backend": {"kind": "codes", "codes": codes},
    }
    if controller is not None:
        d["controller"] = controller
    if surrogate is not None:
        d["surrogate"] = surrogate
    return Scenario.model_validate(d)


def _director_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "codes-director"]


#: a CODES built by scripts/build-codes.sh (stand-in patch): it prints the stand-in banner when its conf asks for it
BANNER = """
import re
_m = re.search(r'standin\\s*=\\s*"(replay|load)"', text)
if _m:
    print({{"replay": "stand-in traffic: replay (patched)", "load": "stand-in traffic: load (patched)"}}[_m.group(1)],
          flush=True)
"""


def _standin(b: Path, ref: Path, client: bool = True, patched: bool = True) -> None:
    """The CODES stand-in executable: it replays run ``ref``'s output, talks to the director (``client``) and, when
    ``patched``, carries the stand-in patches (``backend.codes.standin: load``, the default, needs them)."""
    body = REPLAY
    if client:  # after the stand-in has checked its inputs, before it writes CODES' output
        head, tail = body.split('json.dump({{"argv"', 1)
        body = head + DIRECTOR_CLIENT + 'json.dump({{"argv"' + tail
    body = body.format(ref=str(ref))
    if patched:
        anchor = "text = open(conf).read()\n"
        body = body.replace(anchor, anchor + BANNER.format(banner=STANDIN_BANNER))
    _script(b / "model-net-mpi-replay", body)


@pytest.mark.parametrize("sync", ["skew", "rank"])
def test_hybrid_run_writes_director_and_serves_codes(bins, tmp_path, codes_data, sync):
    """The stand-in's client sends two clients' times (0.36 and 2.1 ms) and asks each for a prediction. Both are
    ranks of MILC (alloc.conf row 0 holds terminals 0 and 1): under ``sync: skew`` (the default) each is answered
    the job's iteration time, the mean of the two clients' predictions; under ``rank`` each its own."""
    from hybridsim.runner import run_scenario

    b, mpirun = bins
    _standin(b, codes_data / "B-72node-milc" / "hf-seq")
    sc = _scenario(b, mpirun, controller={"policy": "surrogate", "params": {"warmup": 8}, "sync": sync},
                   surrogate={"model": "mean"})
    before = len(_director_threads())
    rd, res, summary = run_scenario(sc, tmp_path / "run", mode="hybrid", progress=False)
    d = tmp_path / "run" / "codes"

    conf = parse_conf((d / "dfdally-72.conf").read_text())
    assert conf["MODELNET_GRP"]["dir-nw-lp"] == conf["MODELNET_GRP"]["nw-lp"] == "2"
    assert conf["DIRECTOR"] == {
        "surrogate_family": "iteration-time", "surrogate_backend": "hybridsim", "surrogate_enabled": "1",
        "training_enabled": "1", "inferencing_enabled": "1", "start_iter": "7", "end_iter": "19",
        "debug_prints": "0", "shutdown_zmqml_server_on_finalize": "0", "standin": "load", "standin_scale": "1.0"}

    talk = json.loads((d / "director-replies.json").read_text())
    assert talk["endpoint"].startswith("tcp://127.0.0.1:")
    assert [r["status"] for r in talk["replies"]] == ["done"] * 5
    preds = [float(r["predictions"]) for r in talk["replies"][3:]]
    own = [363600.0, 2100000.0]   # the mean of each client's 5 times
    assert preds == pytest.approx(own if sync == "rank" else [sum(own) / 2] * 2)

    director = summary["backend_stats"]["director"]
    assert director["windows"] == [[8, 20]] and director["codes_windows"] == [[7, 19]]
    assert director["mismatch"] == {"milc": []}
    assert director["endpoint"] == talk["endpoint"]
    assert (director["requests"], director["clients"], director["records"], director["fallbacks"]) == (5, 2, 10, 0)
    assert summary["mode"] == "hybrid" and summary["backend"] == "codes"
    # the record says what stood in for the predicted job's traffic: the scenario's default, load at scale 1
    assert summary["standin"] == {"mode": "load", "scale": 1.0} == res.standin
    assert json.loads((tmp_path / "run" / "manifest.json").read_text())["standin"] == summary["standin"]
    assert res.job_end["milc"] == pytest.approx(8_843_603.86, abs=0.01)
    # stopped with the run: no thread left, and the port answers nobody
    assert len(_director_threads()) == before
    import zmq

    ctx = zmq.Context()
    sock = ctx.socket(zmq.REQ)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(talk["endpoint"])
    sock.send(b'{"cmd": "nothing"}\0')
    assert sock.poll(300) == 0
    sock.close(0)
    ctx.term()


def test_hybrid_run_stops_the_director_when_codes_fails(bins, tmp_path):
    from hybridsim.runner import RunError, run_scenario

    b, mpirun = bins
    # a patched CODES (it carries the stand-in's banner) that fails
    _script(b / "model-net-mpi-replay", f"# {STANDIN_BANNERS['load']}\nimport os, sys\n"
            "assert os.environ['ZMQML_ENDPOINT']\n"
            + FAIL_EXIT)
    sc = _scenario(b, mpirun, controller={"policy": "surrogate", "params": {"warmup": 8}})
    before = len(_director_threads())
    with pytest.raises(RunError, match="status 1"):
        run_scenario(sc, tmp_path / "run", mode="hybrid", progress=False)
    assert len(_director_threads()) == before
    assert "DIRECTOR" in parse_conf((tmp_path / "run" / "codes" / "dfdally-72.conf").read_text())


def test_hybrid_run_with_pdes_policy_starts_no_director(bins, tmp_path, codes_data):
    from hybridsim.runner import run_scenario

    b, mpirun = bins
    _standin(b, codes_data / "B-72node-milc" / "hf-seq", client=False)
    sc = _scenario(b, mpirun, controller={"policy": "pdes"})
    _, _, summary = run_scenario(sc, tmp_path / "run", mode="hybrid", progress=False)
    assert "DIRECTOR" not in parse_conf((tmp_path / "run" / "codes" / "dfdally-72.conf").read_text())
    assert summary["backend_stats"]["director"]["windows"] == []
    assert "endpoint" not in summary["backend_stats"]["director"]
    # nothing predicted, so nothing stood in for anything, whatever backend.codes.standin says
    assert "standin" not in summary
    assert "standin" not in json.loads((tmp_path / "run" / "manifest.json").read_text())


def test_import_warnings_name_the_run_directory_not_its_staging_folder(bins, tmp_path, codes_data):
    """A run is written into a hidden staging folder (``.run.*.partial``) and moved into place at the end: the
    importer's warnings (here: reference run B's local link lines, a known CODES bug skipped on every import) name
    CODES' files by their place in the run directory, which exists after the run, not by the staging folder, which
    does not."""
    import warnings as _warnings

    from codes_bridge.parsers.common import CodesWarning
    from hybridsim.runner import run_scenario

    b, mpirun = bins
    _standin(b, codes_data / "B-72node-milc" / "hf-seq", client=False)
    with _warnings.catch_warnings(record=True) as caught:
        _warnings.simplefilter("always")
        run_scenario(_scenario(b, mpirun), tmp_path / "run", mode="simulate", progress=False)
    emitted = [str(w.message) for w in caught if issubclass(w.category, CodesWarning)]
    recorded = json.loads((tmp_path / "run" / "summary.json").read_text())["backend_stats"]["warnings"]
    link = [m for m in recorded if "router->router" in m]
    assert len(link) == 1 and link[0].startswith("codes/lp-io/dragonfly-link-stats: skipped 108 local")
    assert (tmp_path / "run" / link[0].split(":")[0]).is_file()
    assert emitted == recorded
    assert not any(".partial" in m or str(tmp_path) in m for m in emitted)


def test_bad_controller_is_refused_before_any_run_directory(bins, tmp_path):
    from hybridsim.runner import run_scenario
    from hybridsim.scenario import ScenarioError

    b, mpirun = bins
    sc = _scenario(b, mpirun, controller={"policy": "surrogate", "params": {"warmpu": 8}})
    with pytest.raises(ScenarioError, match=r"controller\.params\.warmpu: .*did you mean 'warmup'"):
        run_scenario(sc, tmp_path / "run", mode="hybrid", progress=False)
    assert not (tmp_path / "run").exists()


def test_codes_backend_declares_that_it_runs_the_policy_itself(bins, tmp_path):
    """The runner's one path asks the backend class: CodesBackend takes hybrid mode (no refusal), runs the policy
    itself (the runner builds no in-process controller) and refuses one handed to run()."""
    from codes_bridge.backend import CodesBackend
    from codes_bridge.launcher import CodesRunError
    from hybridsim.runner import backend_class

    assert backend_class("codes") is CodesBackend
    assert CodesBackend.no_director is None and CodesBackend.runs_policy and not CodesBackend.streams_samples
    b, mpirun = bins
    with pytest.raises(CodesRunError, match="mode='hybrid'"):
        CodesBackend(_scenario(b, mpirun), tmp_path / "run", progress=False).run(director=object())
    assert not (tmp_path / "run").exists()


# ------------------------------------------------------------------------------ predicted iterations recorded
def test_director_answers_become_one_record_per_predicted_iteration(tmp_path):
    """Hand case: job m (6 iterations) rank 0 on network LP 5 logs iterations 0-2, then 5 (3 and 4 predicted by
    answers 10 and 20 ns); job l (5 iterations) rank 0 on LP 7 logs 0-2 and stops (the job ends inside the window: 3
    and 4 predicted, 30 and 40 ns). The record after the jump is CODES' simulated iteration 5, starting where the last
    prediction ended."""
    from codes_bridge.importer import (_expand_director_predictions, read_director_answers,
                                       write_director_answers)
    from hybridsim_common.records import IterationRecord

    def R(job, *rest):
        return IterationRecord("ml"[job], job, *rest)

    recs = [R(0, 0, 0, 0, 100), R(0, 0, 1, 100, 200), R(0, 0, 2, 200, 300), R(0, 0, 5, 300, 400),
            R(1, 0, 0, 0, 110), R(1, 0, 1, 110, 220), R(1, 0, 2, 220, 330)]
    sim = [True] * 7  # as parsed: every record an ITERATION mark
    path = tmp_path / "answers.csv"
    write_director_answers(path, {5: [10.0, 20.0], 7: [30.0, 40.0]})
    answers = read_director_answers(path)
    assert answers == {5: [10.0, 20.0], 7: [30.0, 40.0]}
    alloc, n_its = [[5], [7]], [6, 5]
    warnings: list[str] = []
    out, s = _expand_director_predictions(recs, sim, answers, alloc, n_its, warnings)
    assert [(r.job_id, r.iteration, r.start, r.end) for r in out] == [
        (0, 0, 0, 100), (0, 1, 100, 200), (0, 2, 200, 300), (0, 3, 300, 310), (0, 4, 310, 330), (0, 5, 330, 400),
        (1, 0, 0, 110), (1, 1, 110, 220), (1, 2, 220, 330), (1, 3, 330, 360), (1, 4, 360, 400)]
    assert s == [True, True, True, False, False, True, True, True, True, False, False]
    assert warnings == []
    # too few answers for a rank's gap: left as logged, the record after the jump marked predicted, and said
    out, s = _expand_director_predictions(recs, sim, {5: [10.0], 7: [30.0, 40.0]}, alloc, n_its, warnings)
    assert [r.iteration for r in out] == [0, 1, 2, 5, 0, 1, 2, 3, 4]
    assert s == [True, True, True, False, True, True, True, False, False]
    assert len(warnings) == 1 and "job 0 rank 0: 1 answers for 2 missing iterations" in warnings[0]
    # answers that fill no missing iteration (a job logged to its end): nothing invented
    warnings.clear()
    out, s = _expand_director_predictions(recs[:3], sim[:3], {5: [10.0]}, alloc, [3], warnings)
    assert [r.iteration for r in out] == [0, 1, 2] and s == [True] * 3 and "1 answers for 0 missing" in warnings[0]


def test_director_keeps_its_answers_for_the_run(tmp_path):
    """The in-process director keeps every prediction as sent, per client, fallbacks included."""
    from codes_bridge.director import IterationTimeService, make_model

    svc = IterationTimeService(make_model("mean"))
    svc.answers = {}
    svc.inference(["3", "1"], b"")                    # no history yet: the fallback (1 ms)
    svc.send_records(["3", "2"], b"100 300")
    got = svc.inference(["3", "2"], b"")
    assert svc.answers[3][0] == 1e6 and svc.answers[3][1:] == [float(v) for v in got["predictions"].split()]
    assert len(svc.answers[3]) == 3


def test_the_default_policy_runs_on_codes_and_a_policy_without_a_plan_ahead_form_is_refused(tmp_path, live_only_policy):
    """confident (the default policy) spaces its windows by errors measured in the run, which CODES' director cannot
    follow (its windows are fixed before CODES starts); its plan-ahead form (Policy.ahead) is what CODES runs, so
    the default is accepted (validate has no refusal note). A policy that follows the run and has no plan-ahead form
    is refused before anything is written (exit 2, the default named as what works)."""
    import subprocess
    import sys

    from codes_bridge.backend import CodesBackend
    from controllers.builtin import BUILTIN
    from hybridsim.scenario import parse_scenario

    assert [n for n, c in BUILTIN.items() if not c.plans_ahead] == ["confident"]
    text = ("topology: {groups: 9, routers_per_group: 4, terminals_per_router: 2, global_channels_per_router: 2}\n"
            "jobs:\n"
            "  - {name: milc, ranks: 8, iterations: 20, workload: {kind: milc, dimension_sizes: [2, 2, 2]}}\n"
            "backend: {kind: codes}\n")
    default = parse_scenario(text)
    assert default.controller.policy == "confident" and CodesBackend.hybrid_refusal(default) is None
    # the plan-ahead form: warm-up of probe = 8 iterations, then predicted to the end: one window [8, 20)
    assert plan_director(default).windows == [(8, 20)]
    assert CodesBackend.hybrid_refusal(parse_scenario(text + "controller: {policy: aligned}\n")) is None
    f = tmp_path / "conf.yaml"
    f.write_text(text + f"controller: {{policy: '{live_only_policy}'}}\n")
    run = subprocess.run([sys.executable, "-m", "hybridsim", "run", str(f), "--mode", "hybrid", "-o",
                          str(tmp_path / "out"), "--plugin-path", str(tmp_path)],
                         capture_output=True, text=True, cwd=tmp_path)
    assert run.returncode == 2, run.stderr
    assert "no plan-ahead form" in run.stderr and "the default, confident" in run.stderr
    assert not (tmp_path / "out").exists()
    (tmp_path / "default.yaml").write_text(text)
    val = subprocess.run([sys.executable, "-m", "hybridsim", "validate", str(tmp_path / "default.yaml")],
                         capture_output=True, text=True)
    assert val.returncode == 0 and "--mode hybrid is refused" not in val.stderr