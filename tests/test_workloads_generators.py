"""Workload generators: structure, global send/receive matching, deadlock freedom, determinism, custom workloads,
background destinations, CODES JSON mapping."""

import random
import textwrap
from collections import Counter, defaultdict, deque

import numpy as np
import pytest

from hybridsim.scenario import Job
from hybridsim.workloads import (COMPUTE, IRECV, ISEND, RECV, SEND, WAITALL, WorkloadError, build_workload,
                                 check_matching, cycles_to_ns, from_codes_json)
from hybridsim.workloads.milc import milc_neighbors
from refdata import CODES



def make_job(workload: dict, ranks: int, iterations=2, **kw) -> Job:
    return Job.model_validate(dict(name="j", ranks=ranks, iterations=iterations, workload=workload, **kw))


MILC36 = dict(kind="milc", dimension_sizes=[3, 3, 2, 2], msg_size=49152, compute_delay=100)
LAMMPS32 = dict(kind="lammps", num_x_replicas=2, num_y_replicas=2, num_z_replicas=2)
NN64 = dict(kind="nearest_neighbor", dimension_sizes=[4, 4, 4], msg_size=1024, max_dimension_distance=3)


def run_rendezvous(wl, iteration):
    """Execute one iteration of every rank with the strictest semantics (every send, blocking or not, completes only
    when the matching receive is posted, FIFO per (source, dest, tag)). Returns the ranks that could not finish."""
    n = wl.n_ranks
    progs = [wl.ops(r, iteration) for r in range(n)]
    pc = [0] * n
    posted = [False] * n      # the blocking op at pc has been posted
    done_req = [set() for _ in range(n)]
    sendq = defaultdict(deque)  # (src, dst, tag) -> [(rank, req or None)]
    recvq = defaultdict(deque)
    blocked_done = [False] * n  # the posted blocking op has matched

    def post(key, q_mine, q_other, who):
        if q_other[key]:
            other = q_other[key].popleft()
            for rank, req in (who, other):
                if req is None:
                    blocked_done[rank] = True
                else:
                    done_req[rank].add(req)
        else:
            q_mine[key].append(who)

    progress = True
    while progress:
        progress = False
        for r in range(n):
            ops = progs[r]
            while pc[r] < len(ops):
                op = ops[pc[r]]
                k = op[0]
                if k == COMPUTE:
                    pc[r] += 1
                elif k == ISEND:
                    post((r, op[1], op[3]), sendq, recvq, (r, op[4]))
                    pc[r] += 1
                elif k == IRECV:
                    post((op[1], r, op[2]), recvq, sendq, (r, op[3]))
                    pc[r] += 1
                elif k in (SEND, RECV):
                    if not posted[r]:
                        posted[r], blocked_done[r] = True, False
                        if k == SEND:
                            post((r, op[1], op[3]), sendq, recvq, (r, None))
                        else:
                            post((op[1], r, op[2]), recvq, sendq, (r, None))
                    if not blocked_done[r]:
                        break
                    posted[r] = False
                    pc[r] += 1
                elif k == WAITALL:
                    if not all(q in done_req[r] for q in op[1]):
                        break
                    pc[r] += 1
                progress = True
    return [r for r in range(n) if pc[r] < len(progs[r])]


CASES = {
    "milc36": (MILC36, 36, [0, 1]),
    "milc8-2x2x2": (dict(kind="milc", dimension_sizes=[2, 2, 2], msg_size=100), 8, [0]),
    "lammps32": (LAMMPS32, 32, [0, 5, 10]),
    "nn64-26pt": (NN64, 64, [0]),
    "allreduce36-long": (dict(kind="allreduce", size=65536, count=2), 36, [0]),
    "allreduce12-short": (dict(kind="allreduce", size=8, count=3), 12, [0]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_send_is_matched_and_no_deadlock(name):
    w, ranks, its = CASES[name]
    wl = build_workload(make_job(w, ranks, iterations=max(its) + 1))
    for it in its:
        assert check_matching(wl, it) == []
        assert run_rendezvous(wl, it) == []


def test_lammps_256_matching_and_no_deadlock_in_exchange_step():
    wl = build_workload(make_job(dict(kind="lammps", num_x_replicas=3, num_y_replicas=3, num_z_replicas=3), 256,
                                 iterations=11))
    assert check_matching(wl, 10) == []
    assert run_rendezvous(wl, 10) == []


def test_executor_detects_a_deadlock():
    # a self-check of the executor: two ranks that both Recv first never finish
    class Bad:
        n_ranks = 2

        def ops(self, r, it):
            return [(RECV, 1 - r, 0), (SEND, 1 - r, 8, 0)]
    assert run_rendezvous(Bad(), 0) == [0, 1]


def test_deterministic():
    for w, ranks, its in CASES.values():
        a = build_workload(make_job(w, ranks, iterations=max(its) + 1))
        b = build_workload(make_job(w, ranks, iterations=max(its) + 1), 3, 99)
        for it in its:
            for r in range(ranks):
                assert a.ops(r, it) == b.ops(r, it)
    wl = build_workload(make_job(MILC36, 36))
    ops = wl.ops(0, 0)
    ops.append("mutated")
    assert wl.ops(0, 0)[-1] != "mutated"  # callers get a fresh list


def test_milc_neighbours_and_iteration_structure():
    # [3,3,2,2], rank 0 = (0,0,0,0): d0-: 2, d0+: 1, d1-: 6, d1+: 3, size-2 dims give the same partner twice
    assert milc_neighbors(0, [3, 3, 2, 2], 1) == [2, 1, 6, 3, 9, 9, 18, 18]
    assert milc_neighbors(5, [4, 4, 4, 8], 1) == [4, 6, 1, 9, 53, 21, 453, 69]
    wl = build_workload(make_job(MILC36, 36))
    ops = wl.ops(0, 0)
    c = Counter(op[0] for op in ops)
    assert c[ISEND] == 16 and c[IRECV] == 16
    assert [op for op in ops if op[0] == COMPUTE] == [(COMPUTE, 25.0), (COMPUTE, 25.0)]
    # first half: Irecv(n, tag n) for all n, then Isend(n, tag my_rank)
    assert ops[:8] == [(IRECV, n, n, i) for i, n in enumerate([2, 1, 6, 3, 9, 9, 18, 18])]
    assert ops[8] == (ISEND, 2, 49152, 0, 8)
    assert ops[17] == (WAITALL, tuple(range(8, 16)))
    assert ops[18] == (WAITALL, tuple(range(8)))
    assert cycles_to_ns(100, 4e9) == 25.0


def test_nearest_neighbour_order_and_sync_groups():
    # distance 1 in 3D: per dimension (-, unchanged, +) recursion -> d0-, d1-, d2-, d2+, d1+, d0+
    w = dict(kind="nearest_neighbor", dimension_sizes=[8, 8, 4], msg_size=32768)
    wl = build_workload(make_job(w, 256, iterations=6))
    assert wl.neighbors(0) == [7, 56, 192, 64, 8, 1]
    ops = wl.ops(0, 0)
    assert ops[:2] == [(IRECV, 7, 7, 0), (ISEND, 7, 32768, 0, 1)]
    assert ops[-1] == (WAITALL, tuple(range(12)))
    assert len(ops) == 13
    # 26-point stencil with distance 3
    nn = build_workload(make_job(NN64, 64))
    assert sorted(set(nn.neighbors(21))) == sorted(nn.neighbors(21)) and len(nn.neighbors(21)) == 26
    # iterations_per_sync: 5 SWM iterations, a Waitall every 2 -> 3 hybridsim iterations of 2, 2, 1
    w2 = dict(w, iterations_per_sync=2)
    wl2 = build_workload(make_job(w2, 256, iterations=5))
    assert wl2.iterations == 3
    assert [sum(op[0] == ISEND for op in wl2.ops(0, i)) for i in range(3)] == [12, 12, 6]


def test_lammps_compute_and_exchange_schedule():
    # neigh_check: nothing for 5 calls, then +0.196428571429 per call; the exchange fires past 1.0: step 10
    # (6 x 0.196 = 1.18), then 1.18 - 1 + 5 x 0.196 = 1.16 at step 20
    wl = build_workload(make_job(LAMMPS32, 32, iterations=24))
    assert [wl.step_variant(i) for i in range(24)] == [0] * 5 + [1] * 5 + [2] + [0] * 5 + [1] * 4 + [2, 0, 0, 0]
    # docs/workloads.md §4: with cpu_sim_speedup 1e6 all compute is 0-20 ns; the trace's maximum is 20.25 ns
    delays = [op[1] for it in range(12) for op in wl.ops(0, it) if op[0] == COMPUTE]
    assert max(delays) == 20.25 and min(delays) == 0.0


def test_job_compute_delay_is_prepended():
    wl = build_workload(make_job(MILC36, 36, compute=dict(delay="2us")))
    ops = wl.ops(3, 1)
    assert ops[0] == (COMPUTE, 2000.0)
    assert ops[1:] == build_workload(make_job(MILC36, 36)).ops(3, 1)


def test_background_destinations():
    wl = build_workload(make_job(dict(kind="uniform_random", msg_size=4096, interval="4us"), 4, iterations=None))
    assert wl.background and wl.iterations is None and wl.msg_size == 4096 and wl.interval == 4000.0
    rng = np.random.default_rng(7)
    draws = Counter(wl.destination(0, k, rng) for k in range(40000))
    assert draws[0] == 0  # never itself; a self draw becomes rank 1, which gets twice the share
    assert draws[1] / 40000 == pytest.approx(0.5, abs=0.02)
    assert draws[2] / 40000 == pytest.approx(0.25, abs=0.02)
    a = [wl.destination(3, k, random.Random(5)) for k in range(3)]
    assert a == [wl.destination(3, k, random.Random(5)) for k in range(3)]
    assert all(d != 3 for d in (wl.destination(3, k, rng) for k in range(1000)))
    with pytest.raises(TypeError, match="background"):
        wl.ops(0, 0)


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    (tmp_path / "my_wl.py").write_text(textwrap.dedent("""
        from hybridsim.workloads import Program, compute, isend, irecv, waitall

        def ring(rank, iteration, n_ranks, nbytes=4096):
            p = Program(rank, n_ranks)
            r = p.irecv((rank - 1) % n_ranks, 0)
            s = p.isend((rank + 1) % n_ranks, nbytes, 0)
            p.compute(1000.0)
            p.waitall([r, s])
            p.allreduce(8)
            return p.ops

        def gen(rank, iteration, n_ranks):
            yield compute(5)
            yield irecv(rank, 1, 0)
            yield isend(rank, 10, 1, 1)
            yield waitall([0, 1])

        def bad_peer(rank, iteration, n_ranks):
            return [isend(n_ranks + 3, 8, 0, 0)]

        def bad_wait(rank, iteration, n_ranks):
            return [compute(1), waitall([7])]

        def boom(rank, iteration, n_ranks):
            raise RuntimeError("kaput")
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    return "my_wl"


def test_custom_workload(user_module):
    wl = build_workload(make_job(dict(kind="custom", function=f"{user_module}:ring", params={"nbytes": 100}), 6))
    assert wl.kind == "custom"
    ops = wl.ops(2, 1)
    assert ops[:3] == [(IRECV, 1, 0, 0), (ISEND, 3, 100, 0, 1), (COMPUTE, 1000.0)]
    assert check_matching(wl, 0) == [] and run_rendezvous(wl, 0) == []
    g = build_workload(make_job(dict(kind="custom", function=f"{user_module}:gen"), 2))
    assert len(g.ops(1, 0)) == 4


@pytest.mark.parametrize("fn,match", [
    ("bad_peer", r"job 'j'.*rank 0, iteration 0.*op #0 ISEND\(peer=5.*peer must be a rank in 0\.\.1"),
    ("bad_wait", r"job 'j'.*op #1 WAITALL\(7\).*not created earlier"),
    ("boom", r"job 'j'.*failed for rank 0, iteration 0: RuntimeError: kaput"),
])
def test_custom_workload_errors(user_module, fn, match):
    wl = build_workload(make_job(dict(kind="custom", function=f"{user_module}:{fn}"), 2))
    with pytest.raises(WorkloadError, match=match):
        wl.ops(0, 0)


def test_custom_workload_import_errors(user_module):
    with pytest.raises(WorkloadError, match=r"job 'j': cannot import module 'no_such_mod_xyz'"):
        build_workload(make_job(dict(kind="custom", function="no_such_mod_xyz:f"), 2))
    with pytest.raises(WorkloadError, match=r"job 'j': module 'my_wl' has no attribute 'nope'"):
        build_workload(make_job(dict(kind="custom", function="my_wl:nope"), 2))
    with pytest.raises(WorkloadError, match=r"job 'j'.*cannot be called as fn\(rank, iteration, n_ranks"):
        build_workload(make_job(dict(kind="custom", function="my_wl:gen", params={"x": 1}), 2))


def test_from_codes_json_reference_files():
    found = sorted(CODES.glob("*/*/*.json")) + sorted(CODES.glob("optrace/*.json"))
    assert len(found) >= 8
    for path in found:
        kind, params, iterations = from_codes_json(path)
        assert kind in ("milc", "lammps", "nearest_neighbor") and iterations >= 1
        make_job(dict(kind=kind, **params), 1 if kind == "lammps" else int(np.prod(params["dimension_sizes"])),
                 iterations=iterations)
    kind, params, its = from_codes_json(CODES / "optrace" / "milc-36-2it.json")
    assert (kind, its) == ("milc", 2)
    assert params == dict(dimension_sizes=[3, 3, 2, 2], msg_size=49152, compute_delay=100.0,
                          max_dimension_distance=1, cpu_freq=4e9)


def test_from_codes_json_errors(tmp_path):
    p = tmp_path / "nn.json"
    p.write_text('{"jobs": {"size": 8, "cfg": {"app": "nearest_neighbor", "dimension_sizes": [2, 2, 2], '
                 '"cpu_freq": 4e9}}}')
    with pytest.raises(WorkloadError, match="noop_cnt must be 0"):
        from_codes_json(p)
    p.write_text('{"jobs": {"cfg": {"app": "milc", "dimension_sizes": [2]}}}')
    with pytest.raises(WorkloadError, match="cpu_freq is missing"):
        from_codes_json(p)
    p.write_text('{"jobs": {"cfg": {"app": "hacc", "cpu_freq": 1}}}')
    with pytest.raises(WorkloadError, match="'hacc' is not supported"):
        from_codes_json(p)
    p.write_text('{"jobs": ')
    with pytest.raises(WorkloadError, match=r"nn.json:1:\d+: invalid JSON"):
        from_codes_json(p)


def test_lammps_too_many_ranks_is_a_clear_error():
    with pytest.raises(WorkloadError, match="FFT cutoff"):
        build_workload(make_job(dict(LAMMPS32, num_x_replicas=1, num_y_replicas=1, num_z_replicas=1), 32768))
