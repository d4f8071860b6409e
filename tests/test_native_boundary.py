"""The native core's boundary refuses instead of crashing: every bound method of ``hybridsim.engine.native._core.Core``
(and its constructor's configuration) is driven with ids out of range, negative and non-finite times, integers
beyond 2**53 and 2**63, wrong types and mismatched lengths, in a subprocess, and each call must raise the Python
exception the boundary promises (IndexError for an id or index out of range, ValueError for a bad time, size or
count, KeyError where the Python core raises it for an unknown rank, TypeError for a wrong type or an int beyond
64 bits) -- never kill the interpreter with a signal. A new binding fails the test until it is driven here too.

The Python core refuses the same event times as the native one at the same door (``EventLoop.at``), with the same
message. Skipped by name when the extension is not built."""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from hybridsim.engine import cores
from hybridsim.engine.core import EventLoop

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(
    cores.NativeCore is None,
    reason="native core not built (hybridsim.engine.native._core): `python setup.py build_ext --inplace` or "
           "`pip install -e .` with a C++17 compiler")

# Run in a child: a core built by a short pure run on a 72-node system (its ranks dropped at the end), then every
# bound method called with hostile arguments. Prints one JSON line: per case, the exception's type name or "ok".
DRIVER = r'''
import json, math, sys
import numpy as np
from hybridsim.engine import Engine, cores
from hybridsim.scenario import parse_scenario
from hybridsim.workloads.ops import COMPUTE, ISEND, IRECV, SEND, RECV, WAITALL

configs = []
Real = cores.NativeCore
cores.NativeCore = lambda cfg: (configs.append(cfg), Real(cfg))[1]
sc = parse_scenario("""
topology: {groups: 9, routers_per_group: 4, terminals_per_router: 2, global_channels_per_router: 2, routing: minimal}
jobs:
  - {name: a, ranks: 4, iterations: 1, workload: {kind: allreduce}}
placement: {policy: contiguous}
backend: {embedded: {core: native, progress: false}}
""")
eng = Engine(sc)
eng.run()
c = eng.net.core
cfg = configs[0]
n_ports = len(cfg["cap"])
NV = cfg["nv"]
out = {}

def call(label, f, *args):
    try:
        f(*args)
        out[label] = "ok"
    except Exception as exc:  # the type is what the test checks
        out[label] = type(exc).__name__

BAD_IDS = [-5, 10**6, 2**31, 2**53]
HUGE = [2**63, 2**70]
BAD_TIMES = [math.nan, -1.0, -math.inf]
GID = 60                       # a live rank of job 0, added here (the run's ranks are dropped)
call("add_rank ok", c.add_rank, GID, 0, 0, 3)
call("add_rank other job", c.add_rank, GID + 2, 1, 0, 0)
eng.mpi.ranks[GID] = eng.mpi.ranks[GID + 2] = None  # the engine's side of them: nothing to do at their ends
eng.mpi.on_iteration_end = lambda t, rs: None
h = lambda t, a, b: None

for v in BAD_TIMES + [2**53, 2**60, -5, "x", None]:
    call(f"at t={v!r}", c.at, v, h)
call("at ok", c.at, 1.0, h)
for v in BAD_IDS + HUGE:
    call(f"stop_rank {v}", c.stop_rank, v)
    call(f"drop_rank {v}", c.drop_rank, v)
    call(f"start_iteration gid={v}", c.start_iteration, 0.0, v, 0, [])
    call(f"send_background gid={v}", c.send_background, 0.0, v, GID, 8)
    call(f"send_background dst={v}", c.send_background, 0.0, GID, v, 8)
    call(f"start_background gid={v}", c.start_background, 0.0, v, 4, 8, 100.0)
    call(f"count_bytes {v}", c.count_bytes, v)
    call(f"forget_bytes {v}", c.forget_bytes, v)
    call(f"job_bytes {v}", c.job_bytes, v)
    call(f"job_work {v}", c.job_work, v)
    call(f"pred_job {v}", c.pred_job, v, 2, 1)
    call(f"forget_job {v}", c.forget_job, v)
    call(f"set_mode {v}", c.set_mode, v, 0, True)
    call(f"park j={v}", c.park, v, 0, GID, 0.0)
    call(f"park gid={v}", c.park, 0, 0, v, 0.0)
    call(f"unpark {v}", c.unpark, v)
    call(f"stretch {v}", c.stretch, v, 0, np.zeros((1, 1)))
    call(f"stretch_state {v}", c.stretch_state, v)
    call(f"cut {v}", c.cut, v, 3)
    if v != 10**6:  # a valid id (its rank would be live for the calls above)
        call(f"add_rank gid={v}", c.add_rank, v, 0, 0, 0)
    call(f"add_rank job={v}", c.add_rank, GID + 1, v, 0, 0)
    call(f"add_rank local={v}", c.add_rank, GID + 1, 0, v, 0)
    call(f"add_rank term={v}", c.add_rank, GID + 1, 0, 0, v)
    call(f"randrange {v}", c.randrange, v)
    call(f"set_port_loads {v}", c.set_port_loads, np.array([v % 2**63], np.int64), np.array([0.5]))
for v in BAD_TIMES:
    call(f"start_iteration t={v}", c.start_iteration, v, GID, 0, [])
    call(f"send_background t={v}", c.send_background, v, GID, GID, 8)
    call(f"start_background t={v}", c.start_background, v, GID, 4, 8, 100.0)
    call(f"start_background interval={v}", c.start_background, 0.0, GID, 4, 8, v)
    call(f"park t={v}", c.park, 0, 0, GID, v)
    call(f"sample_every first={v}", c.sample_every, v, 1.0, 0.0, 5, np.zeros(n_ports), np.zeros(n_ports),
         np.zeros((4, n_ports)), np.zeros((n_ports, NV)), h)
call("start_background n=0", c.start_background, 0.0, GID, 0, 8, 100.0)
call("start_background n=2**40", c.start_background, 0.0, GID, 2**40, 8, 100.0)
call("start_background nbytes=-1", c.start_background, 0.0, GID, 4, -1, 100.0)
call("randrange 0", c.randrange, 0)
call("randrange ok", c.randrange, 7)
call("random ok", c.random)
call("noop ok", c.noop)
# op lists: bad times, ids, kinds and integers
for label, ops in [("compute nan", [(COMPUTE, math.nan)]), ("compute -10", [(COMPUTE, -10.0)]),
                   ("isend peer 2**60", [(ISEND, 2**60, 8, 0, 0)]), ("isend peer 2**70", [(ISEND, 2**70, 8, 0, 0)]),
                   ("isend peer 10**6", [(ISEND, 10**6, 8, 0, 0)]), ("send peer -1000", [(SEND, -1000, 8, 0)]),
                   ("irecv tag 2**63", [(IRECV, 0, 2**63, 0)]), ("recv float peer", [(RECV, 0.5, 0)]),
                   ("waitall 2**70", [(WAITALL, [2**70])]), ("waitall unknown", [(WAITALL, [3])]),
                   ("unknown kind", [(99,)]), ("kind str", [("x", 1)]), ("op not a sequence", [5]),
                   ("ops not a sequence", 5)]:
    call(f"start_iteration ops {label}", c.start_iteration, 0.0, GID, 0, ops)
call("start_iteration it=-1", c.start_iteration, 0.0, GID, -1, [])
# predicted iterations: callbacks unset, mismatched lengths, stretches beyond the job
fresh = Real(dict(cfg))  # the engine set the run's core's callbacks: a core without them
fresh.add_rank(0, 0, 0, 0)
fresh.pred_job(0, 2, 1)
call("pred_ends before callbacks", fresh.pred_ends, [0], [0], [0.0], [1.0])
call("stretch before callbacks", fresh.stretch, 0, 0, np.zeros((1, 1)))
call("set_pred_callbacks bad type", fresh.set_pred_callbacks, h, h, 5)
call("pred_ends still before callbacks", fresh.pred_ends, [0], [0], [0.0], [1.0])
call("set_pred_callbacks ok", c.set_pred_callbacks, lambda *a: None, lambda *a: None, lambda *a: None)
call("pred_job ok", c.pred_job, 0, 3, 1)
for v in BAD_IDS:
    call(f"pred_ends gid={v}", c.pred_ends, [v], [0], [0.0], [1.0])
call("pred_job iters=-1", c.pred_job, 0, -1, 1)
call("pred_job ranks=-1", c.pred_job, 0, 3, -1)
call("pred_ends short lists", c.pred_ends, [GID, GID], [0], [0.0], [1.0])
call("pred_ends end nan", c.pred_ends, [GID], [0], [0.0], [math.nan])
call("park other job's rank", c.park, 0, 0, GID + 2, 0.0)
call("stretch first=-1", c.stretch, 0, -1, np.zeros((1, 1)))
call("stretch first=2**62", c.stretch, 0, 2**62, np.zeros((1, 1)))
call("stretch beyond", c.stretch, 0, 2, np.zeros((2, 1)))
call("stretch nan", c.stretch, 0, 0, np.full((1, 1), math.nan))
call("stretch wrong width", c.stretch, 0, 0, np.zeros((1, 3)))
call("stretch ok", c.stretch, 0, 0, np.zeros((2, 1)))
call("cut 2**62", c.cut, 0, 2**62)
call("cut -2**62", c.cut, 0, -2**62)
call("stretch_state ok", c.stretch_state, 0, -1)
# the record store: rows outside it refused; an empty store taken whole
for lo, hi in ((-1, 0), (0, 1), (1, 0), (0, 2**62), (2**62, 2**62)):
    call(f"record_columns {lo} {hi}", c.record_columns, lo, hi)
call("record_columns 0 0", c.record_columns, 0, 0)
call("take_records ok", c.take_records)
# port loads and samples: ports out of range, arrays of the wrong shape or dtype
call("set_port_loads port -1", c.set_port_loads, np.array([-1], np.int64), np.array([0.5]))
call("set_port_loads port n", c.set_port_loads, np.array([n_ports], np.int64), np.array([0.5]))
call("set_port_loads lengths", c.set_port_loads, np.array([0, 1], np.int64), np.array([0.5]))
call("set_port_loads dtype", c.set_port_loads, np.array([0], np.int32), np.array([0.5]))
call("set_port_loads backlog length", c.set_port_loads, np.array([0], np.int64), np.array([0.5]), np.array([1.0, 2.0]))
arrs = [np.zeros(n_ports), np.ones(n_ports), np.zeros((4, n_ports)), np.zeros((n_ports, NV))]
out_ok = np.zeros((n_ports, 7 + 3 * NV), np.float32)
call("sample_ports ok", c.sample_ports, 10.0, 1.0, *arrs, out_ok)
call("sample_ports short", c.sample_ports, 10.0, 1.0, np.zeros(3), *arrs[1:], out_ok)
call("sample_ports out", c.sample_ports, 10.0, 1.0, *arrs, np.zeros((2, 2), np.float32))
call("sample_ports read-only", c.sample_ports, 10.0, 1.0, arrs[0], arrs[1], np.zeros((4, n_ports)),
     np.broadcast_to(np.zeros(NV), (n_ports, NV)), out_ok)
call("sample_every interval 0", c.sample_every, 0.0, 0.0, 0.0, 5, *arrs, h)
call("sample_every t0 nan", c.sample_every, 0.0, 1.0, math.nan, 5, *arrs, h)
call("sample_every short", c.sample_every, 0.0, 1.0, 0.0, 5, np.zeros(3), *arrs[1:], h)
call("sample_pull wrong", c.sample_pull, np.zeros((5, 1, 1), np.float32))
call("sample_count ok", c.sample_count)
call("sample_stop ok", c.sample_stop)
# generator states
st = c.rng_state()
call("rng_state ok", c.rng_state)
call("set_rng_state short", c.set_rng_state, st[:-1])
call("set_rng_state pos -1", c.set_rng_state, st[:-1] + [-1])
call("set_rng_state pos 625", c.set_rng_state, st[:-1] + [625])
call("set_rng_state word 2**32", c.set_rng_state, [2**32] + st[1:])
call("set_rng_state word -1", c.set_rng_state, [-1] + st[1:])
call("set_bg_rng_state pos 10**6", c.set_bg_rng_state, st[:-1] + [10**6])
call("set_rng_state ok", c.set_rng_state, st)
call("bg_rng_state ok", c.bg_rng_state)
# the configuration: every table's indices and lengths
def bad_cfg(label, **change):
    d = dict(cfg)
    for k, f in change.items():
        d[k] = f(d[k])
    call(f"Core {label}", Real, d)
def setitem(i, v):
    def f(xs):
        xs = list(xs)
        xs[i] = v
        return xs
    return f
bad_cfg("ok")
bad_cfg("nv=1", nv=lambda v: 1)
bad_cfg("a=0", a=lambda v: 0)
bad_cfg("routing=9", routing=lambda v: 9)
bad_cfg("P=0", P=lambda v: 0)
bad_cfg("credit_delay nan", credit_delay=lambda v: math.nan)
bad_cfg("nspb short", nspb=lambda v: v[:-1])
bad_cfg("nspb -1", nspb=setitem(0, -1.0))
bad_cfg("cap -1", cap=setitem(0, -1))
bad_cfg("dest out", dest=setitem(0, 10**6))
bad_cfg("term_router out", term_router=setitem(0, 10**6))
bad_cfg("term_router short", term_router=lambda v: v[:-1])
bad_cfg("tvc out", tvc=setitem(0, -1))
bad_cfg("lport out", lport=setitem(1, 10**6))
bad_cfg("lport short", lport=lambda v: v[:-1])
bad_cfg("gp_off out", gp_off=setitem(0, 10**6))
bad_cfg("gp_len -1", gp_len=setitem(0, -1))
bad_cfg("gp_ports out", gp_ports=setitem(0, 10**6))
bad_cfg("lg_ports out", lg_ports=setitem(0, -7))
bad_cfg("reach_g out", reach_g=setitem(0, 99))
bad_cfg("reach_off short", reach_off=lambda v: v[:-1])
# the remaining methods, plain calls on what is left
for name in ("counters", "check_invariants", "bytes_in_network", "bytes_injected", "bytes_delivered", "stop"):
    call(f"{name} ok", getattr(c, name))
for name in ("now", "events", "pending", "packets", "bytes_self", "messages"):
    call(f"{name} ok", getattr, c, name)
call("run nan", c.run, math.nan, -1, None, 0)
call("run ok", c.run, math.inf, -1, None, 1)
out["__covered__"] = sorted({k.split()[0] for k in out})
print(json.dumps(out))
'''


@pytest.fixture(scope="module")
def outcomes():
    proc = subprocess.run([sys.executable, "-c", DRIVER], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode >= 0, f"the interpreter died of signal {-proc.returncode}:\n{proc.stderr[-3000:]}"
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_every_bound_method_is_driven(outcomes):
    bound = {n for n in dir(cores.NativeCore) if not n.startswith("_")}
    assert bound <= set(outcomes["__covered__"]), sorted(bound - set(outcomes["__covered__"]))
    assert "set_ports" not in bound  # never called from Python: removed


def test_ids_out_of_range_raise_index_or_value_errors(outcomes):
    for v in (-5, 10**6, 2**31, 2**53):
        for name in ("stop_rank", "drop_rank", "start_iteration gid=", "count_bytes", "pred_job", "set_mode",
                     "park j=", "park gid=", "stretch", "stretch_state", "add_rank term="):
            label = f"{name}{v}" if name.endswith("=") else f"{name} {v}"
            assert outcomes[label] == "IndexError", (label, outcomes[label])
        for name in ("add_rank gid=", "add_rank job=", "add_rank local="):  # beyond 31 bits
            assert outcomes.get(f"{name}{v}", "ok") == ("ok" if v == 10**6 else "ValueError"), name
        # an unknown rank named as a peer: KeyError, as the Python core's rank table raises
        assert outcomes[f"send_background gid={v}"] == outcomes[f"send_background dst={v}"] == "KeyError"
        assert outcomes[f"start_background gid={v}"] == outcomes[f"pred_ends gid={v}"] == "KeyError"
        # nothing to forget: as the Python core (dict.pop with a default); nothing counted: None
        assert outcomes[f"forget_bytes {v}"] == outcomes[f"forget_job {v}"] == outcomes[f"unpark {v}"] == "ok"
        assert outcomes[f"cut {v}"] == outcomes[f"job_bytes {v}"] == outcomes[f"job_work {v}"] == "ok"
    for v in (2**63, 2**70):  # not a 64-bit integer: refused by the binding's conversion
        assert outcomes[f"stop_rank {v}"] == outcomes[f"count_bytes {v}"] == "TypeError"
    assert outcomes["set_port_loads port -1"] == outcomes["set_port_loads port n"] == "IndexError"
    assert outcomes["park other job's rank"] == "ValueError"


def test_bad_times_sizes_and_counts_raise_value_errors(outcomes):
    for v in ("nan", "-1.0", "-inf"):
        for name in ("start_iteration t=", "send_background t=", "start_background t=", "start_background interval=",
                     "park t=", "sample_every first="):
            assert outcomes[f"{name}{v}"] == "ValueError", (name, v)
    for label in ("at t=nan", "at t=-1.0", "at t=-inf", "at t=9007199254740992", "at t=1152921504606846976",
                  "at t=-5", "start_background n=0", "start_background n=2**40", "start_background nbytes=-1",
                  "randrange 0", "randrange -5", "pred_job iters=-1", "pred_job ranks=-1", "pred_ends short lists",
                  "pred_ends end nan", "pred_ends before callbacks", "pred_ends still before callbacks",
                  "stretch before callbacks", "stretch first=-1", "stretch first=2**62", "stretch beyond",
                  "stretch nan", "stretch wrong width", "set_port_loads lengths", "set_port_loads backlog length", "sample_ports short",
                  "sample_ports out", "sample_every interval 0", "sample_every t0 nan",
                  "sample_every short", "sample_pull wrong", "set_rng_state short", "set_rng_state pos -1",
                  "set_rng_state pos 625", "set_rng_state word 2**32", "set_rng_state word -1",
                  "set_bg_rng_state pos 10**6", "start_iteration it=-1", "randrange 9007199254740992"):
        assert outcomes[label] == "ValueError", (label, outcomes[label])
    assert outcomes["at t='x'"] == outcomes["at t=None"] == "TypeError"
    assert outcomes["set_pred_callbacks bad type"] == "TypeError"
    assert outcomes["sample_ports read-only"] == "TypeError"  # not a writable C-ordered array: never copied
    for lo, hi in ((-1, 0), (0, 1), (1, 0), (0, 2**62), (2**62, 2**62)):
        assert outcomes[f"record_columns {lo} {hi}"] == "IndexError", (lo, hi)
    for label in ("record_columns 0 0", "take_records ok", "at ok", "add_rank ok", "set_pred_callbacks ok",
                  "pred_job ok", "stretch ok", "cut 2**62",
                  "cut -2**62", "stretch_state ok", "sample_ports ok", "sample_count ok", "sample_stop ok",
                  "set_rng_state ok", "randrange ok", "random ok", "noop ok", "Core ok", "run ok", "run nan"):
        assert outcomes[label] == "ok", (label, outcomes[label])


def test_op_lists_are_checked_where_they_enter(outcomes):
    want = {"compute nan": "ValueError", "compute -10": "ValueError", "isend peer 2**60": "ValueError",
            "isend peer 2**70": "ValueError", "isend peer 10**6": "KeyError", "send peer -1000": "KeyError",
            "irecv tag 2**63": "ValueError", "recv float peer": "TypeError", "waitall 2**70": "ValueError",
            "waitall unknown": "ValueError", "unknown kind": "ValueError", "kind str": "TypeError",
            "op not a sequence": "TypeError", "ops not a sequence": "TypeError"}
    got = {k: outcomes[f"start_iteration ops {k}"] for k in want}
    assert got == want


def test_a_configuration_with_an_index_out_of_its_table_is_refused(outcomes):
    value = ("nv=1", "a=0", "routing=9", "P=0", "credit_delay nan", "nspb short", "nspb -1", "cap -1",
             "term_router short", "lport short", "reach_off short")
    index = ("dest out", "term_router out", "tvc out", "lport out", "gp_off out", "gp_len -1", "gp_ports out",
             "lg_ports out", "reach_g out")
    assert {k: outcomes[f"Core {k}"] for k in value} == {k: "ValueError" for k in value}
    assert {k: outcomes[f"Core {k}"] for k in index} == {k: "IndexError" for k in index}


@pytest.mark.parametrize("t", [math.nan, -1.0, -math.inf, -5, 2**53, 2**60, 2**53 + 1])
def test_both_cores_refuse_the_same_event_times_with_the_same_message(t):
    msgs = []
    for at in (EventLoop().at, _native_at()):
        with pytest.raises(ValueError) as ei:
            at(t, print)
        msgs.append(str(ei.value))
    assert msgs[0] == msgs[1]
    assert ("2**53" in msgs[0]) == (isinstance(t, int) and t >= 2**53)


@pytest.mark.parametrize("t", [0, 2**53 - 1, 1.5, float(2**60), math.inf])
def test_both_cores_take_times_that_are_exact_doubles(t):
    loop = EventLoop()
    loop.at(t, print)
    _native_at()(t, print)
    assert loop.pending == 1


def test_a_non_number_time_is_a_type_error_on_both_cores():
    for at in (EventLoop().at, _native_at()):
        with pytest.raises(TypeError):
            at("1", print)


def _native_at():
    """A bare native core's ``at`` (the constructor's tables for a one-router, one-terminal, two-port system)."""
    cfg = dict(a=1, p=1, g=1, nv=4, P=512, routing=0, tcap=8, credit_delay=1.0, t_nspb=0.1, t_lat=10.0,
               max_packets=math.inf, exact_credits=False, debug=False, cap=[4, 4], nspb=[0.1, 0.1],
               delay=[10.0, 10.0], nspb_nominal=[0.1, 0.1], delay_nominal=[10.0, 10.0], max_background=0.9,
               dest=[0, 0], to_term=[True, False], local=[False, True], term_router=[0], tvc=[3], lport=[-1],
               gp_off=[0], gp_len=[0], gp_ports=[], lg_off=[0], lg_len=[0], lg_ports=[], reach_off=[0], reach_len=[0],
               reach_g=[], on_iteration_end=None, raise_limit=None)
    return cores.NativeCore(cfg).at
