"""Embedded engine, message layer and runs: MPI eager/rendezvous timing (CODES' offsets, docs/workloads.md §2),
director modes, determinism, invariants in debug mode, and MILC fidelity against the recorded CODES run B."""

import re
from pathlib import Path

import numpy as np
import pytest

from hybridsim_common.backend import Mode
from hybridsim.engine import Engine
from hybridsim_common.records import PORT_FEATURES, write_iterations, write_ports
from hybridsim.scenario import load_scenario, parse_scenario
from hybridsim_common.units import bytes_to_ns
from hybridsim.workloads.ops import COMPUTE, IRECV, ISEND, RECV, SEND, WAITALL
from refdata import CODES

LT = bytes_to_ns(4096, 5.25)
REPO = Path(__file__).resolve().parents[1]

TOPO72 = """
topology: {groups: 9, routers_per_group: 4, terminals_per_router: 2, global_channels_per_router: 2, routing: %s}
"""


class StubJob:
    """A tiny hand-written workload: ``table[rank]`` = ops of every iteration."""

    background = False

    def __init__(self, table, iterations=1):
        self.table = table
        self.n_ranks = len(table)
        self.iterations = iterations

    def ops(self, rank, iteration):
        return list(self.table[rank])


def scenario(jobs_yaml, routing="minimal", extra=""):
    return parse_scenario(TOPO72 % routing + "seed: 3\n" + jobs_yaml + extra)


TWO = """
jobs:
  - {name: a, ranks: 2, iterations: 1, workload: {kind: allreduce}}
placement: {policy: contiguous}
"""


def run_two(table, iterations=1, director=None):
    sc = scenario(TWO.replace("iterations: 1", f"iterations: {iterations}"))
    eng = Engine(sc, debug=True, workloads=[StubJob(table, iterations)])
    return eng.run(director=director), eng


def ends(res):
    return {(r.rank, r.iteration): r.end for r in res.records}


def test_eager_message_timing():
    # rank 0 and 1 share router 0; 8 B eager: 10 + 0.55*8 + 3500 ns offset, local latency 0.505..1.005, 1556.056 ns
    res, _ = run_two([[(SEND, 1, 8, 0)], [(RECV, 0, 0)]])
    e = ends(res)
    lat = 2 * bytes_to_ns(8, 5.25) + 100 + 2 * LT
    off = 10 + 0.55 * 8 + 3500
    assert off + lat + 0.505 <= e[(1, 0)] <= off + lat + 1.005
    assert off + 0.505 <= e[(0, 0)] <= off + 1.005   # blocking send: last packet starts injection


def test_rendezvous_timing():
    # 64 KiB >= 8192: RTS (64 B) + ACK (64 B) + DATA (16 packets pipelined over two 5.25 GiB/s links), 3510 ns each leg
    res, _ = run_two([[(ISEND, 1, 65536, 7, 0), (WAITALL, (0,))], [(IRECV, 0, 7, 0), (WAITALL, (0,))]])
    e = ends(res)
    ctrl = 2 * bytes_to_ns(64, 5.25) + 100 + 2 * LT
    data = 19 * LT + 100
    base = 3 * 3510 + 2 * ctrl
    assert base + data + 3 * 0.505 <= e[(1, 0)] <= base + data + 3 * 1.005
    assert base + 15 * LT + 3 * 0.505 <= e[(0, 0)] <= base + 15 * LT + 3 * 1.005


def test_unexpected_messages_match_fifo_by_source_and_tag():
    # rank 0 sends two eager messages with different tags before rank 1 posts; rank 1 receives tag 2 first
    table = [[(SEND, 1, 100, 1), (SEND, 1, 200, 2), (RECV, 1, 9)],
             [(COMPUTE, 20000.0), (RECV, 0, 2), (RECV, 0, 1), (SEND, 0, 8, 9)]]
    res, _ = run_two(table)
    e = ends(res)
    assert e[(1, 0)] > 20000 and e[(0, 0)] > e[(1, 0)]


class PredictSecond:
    keep_background = False

    def __init__(self):
        self.calls = []

    def mode_for(self, job_id, iteration):
        self.calls.append((job_id, iteration))
        return Mode.PREDICT if iteration == 1 else Mode.SIMULATE

    def predict(self, job_id, iteration, ranks, starts):
        self.pred = (ranks.copy(), starts.copy())
        return np.full(len(ranks), 12345.0)


def test_director_predict_parks_ranks_and_injects_nothing():
    table = [[(ISEND, 1, 65536, 0, 0), (IRECV, 1, 0, 1), (WAITALL, (0, 1))],
             [(ISEND, 0, 65536, 0, 0), (IRECV, 0, 0, 1), (WAITALL, (0, 1))]]
    full, _ = run_two(table, iterations=3)
    d = PredictSecond()
    res, _ = run_two(table, iterations=3, director=d)
    assert d.calls == [(0, 0), (0, 1), (0, 2)]           # once per (job, iteration)
    recs = {(r.rank, r.iteration): (r, s) for r, s in zip(res.records, res.simulated)}
    assert len(recs) == 6
    starts = {r: recs[(r, 1)][0].start for r in (0, 1)}
    for r in (0, 1):
        rec, sim = recs[(r, 1)]
        assert not sim and rec.end == pytest.approx(rec.start + 12345.0)
        assert recs[(r, 0)][1] and recs[(r, 2)][1]
    assert list(d.pred[0]) == [0, 1] and list(d.pred[1]) == [starts[0], starts[1]]
    assert res.stats["packets"] == full.stats["packets"] * 2 // 3


MIXED = """
jobs:
  - {name: milc, ranks: 36, iterations: 2, workload: {kind: milc, dimension_sizes: [3, 3, 2, 2], msg_size: 49152}}
  - {name: nn, ranks: 24, iterations: 2,
     workload: {kind: nearest_neighbor, dimension_sizes: [4, 3, 2], msg_size: 16384, max_dimension_distance: 1}}
  - {name: bg, ranks: 8, workload: {kind: uniform_random, msg_size: 4096, interval: 8000}}
placement: {policy: random}
sampling: {interval: 50us}
"""


@pytest.mark.parametrize("routing", ["minimal", "prog-adaptive"])
def test_debug_run_conserves_bytes_and_respects_buffers(routing):
    sc = scenario(MIXED, routing)
    eng = Engine(sc, debug=True)
    res = eng.run()                           # invariants checked every 1024 events and at the end
    assert not res.partial
    assert set(res.job_end) == {"milc", "nn"}
    assert len(res.records) == 36 * 2 + 24 * 2
    ports = res.ports
    assert ports.features[:len(PORT_FEATURES)] == PORT_FEATURES
    assert ports.n_ports == 36 * 7
    occ = ports.feature("vc_occ")
    assert (occ >= 0).all()
    for k in range(4):
        assert (ports.feature(f"vc{k}_credits") >= 0).all()
    # every byte sent out of a terminal port arrived, or is still on its terminal link: the background job sends
    # until the last job ends, so packets can be between a terminal port and their terminal when the run stops
    lt = res.link_totals
    term = lt["port_class"] == 2
    sent, got = lt["bytes"][term].sum(), res.stats["bytes_delivered"]
    assert got <= sent <= got + eng.net.bytes_in_network()
    assert abs(ports.feature("bytes").sum() - lt["bytes"].sum()) < 1e-3 * lt["bytes"].sum()


def test_same_seed_identical_parquet(tmp_path):
    out = []
    for k in range(2):
        res = Engine(scenario(MIXED, "prog-adaptive")).run()
        write_iterations(res.records, tmp_path / f"it{k}.parquet")
        write_ports(res.ports, tmp_path / f"ports{k}.parquet")
        out.append(res)
    assert (tmp_path / "it0.parquet").read_bytes() == (tmp_path / "it1.parquet").read_bytes()
    assert (tmp_path / "ports0.parquet").read_bytes() == (tmp_path / "ports1.parquet").read_bytes()
    assert out[0].events == out[1].events
    other = Engine(parse_scenario((TOPO72 % "prog-adaptive") + "seed: 4\n" + MIXED)).run()
    assert [r.end for r in other.records] != [r.end for r in out[0].records]


def test_end_time_and_max_events_mark_partial():
    sc = scenario(MIXED, "minimal", "backend: {embedded: {end_time: 30us}}\n")
    res = Engine(sc).run()
    assert res.partial and res.end_time == pytest.approx(30000.0)
    sc = scenario(MIXED, "minimal", "backend: {embedded: {max_events: 5000}}\n")
    res = Engine(sc).run()
    assert res.partial and res.events == 5000


def codes_iteration_means(path, n_iter):
    marks = {}
    for line in open(path):
        m = re.match(r"ITERATION (\d+) node \d+ job (\d+) rank (\d+) time ([\d.]+)", line)
        if m and int(m[1]) < n_iter:
            marks[(int(m[3]), int(m[1]))] = float(m[4])
    durs = [marks[(r, i)] - (marks[(r, i - 1)] if i else 0.0) for (r, i) in marks]
    return float(np.mean(durs))


def test_milc_72_nodes_within_15_percent_of_codes():
    sc = load_scenario(REPO / "benchmarks" / "scenarios" / "B-72node-milc.yaml")
    sc.jobs[0].iterations = 3
    res = Engine(sc).run()
    ours = np.mean([r.duration for r in res.records])
    ref = codes_iteration_means(CODES / "B-72node-milc" / "hf-seq" / "iteration-logs" / "pe=0.txt", 3)
    assert abs(ours / ref - 1) < 0.15, (ours, ref)


class PredictMiddleKeepBackground:
    """Job 0 is predicted in iterations 2-3 and leaves its measured load on the links."""

    keep_background = True

    def mode_for(self, job_id, iteration):
        return Mode.PREDICT if job_id == 0 and iteration in (2, 3) else Mode.SIMULATE

    def predict(self, job_id, iteration, ranks, starts):
        return np.full(len(ranks), 200_000.0)


def test_keep_background_reduces_capacity_of_links_the_predicted_job_used():
    sc = scenario(MIXED.replace("iterations: 2", "iterations: 5"), "minimal")
    eng = Engine(sc)
    seen = []

    def on_record(rec, simulated):
        if not simulated:
            net = eng.net
            slowed = [p for p in range(net.n_ports) if net.nspb[p] > net.nspb_nominal[p] * (1 + 1e-9)]
            used = [p for p in range(net.n_ports) if eng.mpi.job_bytes(0)[p] > 0]
            seen.append((slowed, used))

    res = eng.run(director=PredictMiddleKeepBackground(), on_record=on_record)
    assert len(seen) == 2 * 36
    slowed, used = seen[0]
    assert slowed and set(slowed) <= set(used)
    # utilisation is a fraction of capacity: service time grows by 1 / (1 - u) with u <= 0.9
    net = eng.net
    assert all(net.nspb[p] == net.nspb_nominal[p] for p in range(net.n_ports))   # restored after the job ended
    assert sum(1 for s in res.simulated if not s) == 2 * 36


def test_no_port_sampling_still_gives_link_totals():
    sc = scenario(MIXED, "minimal", "backend: {embedded: {end_time: 100us}}\n")
    sc.sampling.ports = False
    res = Engine(sc).run()
    assert res.ports is None
    assert res.link_totals["bytes"].sum() > 0 and len(res.link_totals["bytes"]) == 36 * 7


def test_waitall_on_unknown_request_is_a_clear_error():
    with pytest.raises(ValueError, match="WAITALL names request 5"):
        run_two([[(WAITALL, (5,))], []])


def test_job_compute_delay_adds_to_every_iteration():
    def durations(delay):
        sc = scenario(TWO.replace("iterations: 1", "iterations: 3").replace(
            "workload: {kind: allreduce}", "workload: {kind: allreduce}, compute: {delay: %s}" % delay))
        res = Engine(sc).run()
        return {(r.rank, r.iteration): r.duration for r in res.records}

    base, slow = durations(0), durations("10us")
    assert len(base) == 6
    for k in base:
        assert slow[k] == pytest.approx(base[k] + 10_000.0, abs=1e-6)


def test_progress_shows_each_jobs_mode():
    from hybridsim_common.backend import Mode
    from hybridsim.engine.engine import jobs_progress

    txt = jobs_progress(["milc", "lammps", "nn"], [3, 24, 0], [100, 24, 10], [Mode.PREDICT, Mode.SIMULATE, None])
    assert txt == "milc:3/100P lammps:24/24 nn:0/10"
    assert jobs_progress(["a"], [5], [9], [Mode.SIMULATE]) == "a:5/9S"
