"""The native core (``backend.embedded.core: native``) against the Python core, the reference: the same scenario on
both gives identical records (float for float), event counts, job ends, link totals and port samples -- on the
examples that run in seconds, every routing, hybrid runs with a director (keep_background mean and profile), job
streams with kills at the walltime, background traffic, partial runs -- and its Mersenne Twister draws CPython's
numbers. Skipped by name when the extension is not built (``python setup.py build_ext --inplace``)."""

import random
from pathlib import Path

import numpy as np
import pytest

from hybridsim.engine import Engine, EngineError, LimitExceeded
from hybridsim.engine import cores
from hybridsim.runner import build_controller, run_scenario
from hybridsim.scenario import load_scenario, parse_scenario
from hybridsim.workloads.ops import ISEND, WAITALL

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(
    cores.NativeCore is None,
    reason="native core not built (hybridsim.engine.native._core): `python setup.py build_ext --inplace` or "
           "`pip install -e .` with a C++17 compiler")

TOPO72 = "topology: {groups: 9, routers_per_group: 4, terminals_per_router: 2, global_channels_per_router: 2, " \
         "routing: %s}\n"

MIXED = """
seed: 5
jobs:
  - {name: milc, ranks: 36, iterations: 4, workload: {kind: milc, dimension_sizes: [3, 3, 2, 2], msg_size: 49152}}
  - {name: nn, ranks: 24, iterations: 4, workload: {kind: nearest_neighbor, dimension_sizes: [4, 3, 2],
                                                    msg_size: 4096}}
  - {name: noise, ranks: 8, workload: {kind: uniform_random, msg_size: 20000, interval: 3000}}
placement: {policy: random}
sampling: {interval: 20us}
limits: {max_offered_load: 1.5}   # the noise offers 1.18 x a terminal link: both cores under overload, briefly
"""


def on_core(sc, core):
    sc.backend.embedded.core = core
    sc.backend.embedded.progress = False
    return sc


def records(res):
    return [(r.job, r.job_id, r.rank, r.iteration, r.start, r.end) for r in res.records]


def assert_same(nat, py):
    """Everything a run returns is the same on both cores (bar wall time and the core's name)."""
    assert records(nat) == records(py)
    assert nat.simulated == py.simulated
    assert (nat.events, nat.end_time, nat.partial) == (py.events, py.end_time, py.partial)
    assert nat.job_end == py.job_end and nat.job_start == py.job_start and nat.job_killed == py.job_killed
    skip = ("events_per_s", "core")
    assert {k: v for k, v in nat.stats.items() if k not in skip} == {k: v for k, v in py.stats.items() if k not in skip}
    assert nat.stats["core"] == "native" and py.stats["core"] == "python"
    assert nat.link_totals.keys() == py.link_totals.keys()
    for k, v in py.link_totals.items():
        assert np.array_equal(np.asarray(nat.link_totals[k]), np.asarray(v)), k
    assert (nat.ports is None) == (py.ports is None)
    if py.ports is not None:
        assert nat.ports.features == py.ports.features
        assert np.array_equal(nat.ports.t_end, py.ports.t_end)
        assert np.array_equal(nat.ports.values, py.ports.values, equal_nan=True)


def both(make_scenario, director=None, **kw):
    out = []
    for core in ("native", "python"):
        d = director() if director is not None else None
        eng = Engine(on_core(make_scenario(), core), **kw)
        out.append((eng.run(director=d), eng))
    (nat, ne), (py, pe) = out
    assert ne.core == "native" and pe.core == "python"
    assert_same(nat, py)
    return nat, py


# ------------------------------------------------------------------------------------------------ random stream
def test_mersenne_twister_draws_cpythons_numbers_from_the_same_state():
    sc = on_core(parse_scenario(TOPO72 % "minimal" + MIXED), "native")
    rng = random.Random(12345)
    _loop, net, _mpi = cores.build("native", sc.build_topology(), sc.topology, rng)
    core = net.core
    ref = random.Random(12345)
    core.set_rng_state(list(ref.getstate()[1]))
    ns = [1, 2, 3, 4, 5, 7, 8, 9, 31, 32, 33, 100, 1000, 65535, 65536, 65537, 2**31 - 1, 2**31, 2**31 + 1, 2**32 - 1]
    for k in range(3000):
        if k % 3 == 0:
            assert core.random() == ref.random()
        else:
            n = ns[k % len(ns)]
            assert core.randrange(n) == ref.randrange(n), n
    # the state goes back: Python continues where the core stopped
    assert tuple(core.rng_state()) == ref.getstate()[1]


def test_the_runs_generator_continues_after_a_native_run_where_the_python_one_does():
    states = []
    for core in ("native", "python"):
        eng = Engine(on_core(parse_scenario(TOPO72 % "adaptive" + MIXED), core))
        eng.run()
        states.append(eng.rng.getstate())
    assert states[0] == states[1]


# ------------------------------------------------------------------------------------------------ scenarios
@pytest.mark.parametrize("name", ["quickstart.yaml"])
def test_examples_give_identical_results(name):
    both(lambda: load_scenario(REPO / "examples" / name))


@pytest.mark.parametrize("routing", ["minimal", "nonminimal", "adaptive", "prog-adaptive"])
def test_every_routing_with_background_traffic_and_port_samples(routing):
    sc_text = TOPO72 % routing + MIXED
    nat, _ = both(lambda: parse_scenario(sc_text))
    assert nat.ports is not None and len(nat.records) == (36 + 24) * 4
    assert nat.stats["messages"] > nat.stats["packets"] / 20 > 0


def test_a_congested_network_with_small_buffers_and_heavy_background():
    text = TOPO72 % "prog-adaptive" + MIXED.replace("interval: 3000", "interval: 400").replace(
        "max_offered_load: 1.5", "max_offered_load: 10")

    def make():
        sc = parse_scenario(text)
        sc.topology.vc_buffer.local = sc.topology.packet_size * 2
        sc.topology.vc_buffer.global_ = sc.topology.packet_size * 2
        return sc
    nat, _ = both(make)
    assert nat.link_totals["stalled"].sum() > 0


def test_partial_runs_stop_at_the_same_event_and_time():
    text = TOPO72 % "adaptive" + MIXED
    for extra in ({"max_events": 54_321}, {"end_time": 61_000.0}):
        def make():
            sc = parse_scenario(text)
            for k, v in extra.items():
                setattr(sc.backend.embedded, k, v)
            return sc
        nat, _ = both(make)
        assert nat.partial


# ------------------------------------------------------------------------------------------------ hybrid runs
HYBRID = """
seed: 2
topology: {groups: 9, routers_per_group: 4, terminals_per_router: 2, global_channels_per_router: 2}
jobs:
  - {name: fast, ranks: 8, iterations: 40, workload: {kind: allreduce, size: 2048}}
  - {name: slow, ranks: 8, iterations: 12, workload: {kind: allreduce, size: 65536, count: 4}}
  - {name: noise, ranks: 4, workload: {kind: uniform_random, msg_size: 4096, interval: 20000}}
placement: {policy: random}
sampling: {interval: 50us}
surrogate: {model: mean, config: {k: 2}}
controller: {policy: %s, params: {warmup: 2, ft: 4, truth: 1}, keep_background: %s, sync: %s}
"""


@pytest.mark.parametrize("policy,keep,sync", [("aligned", "false", "job"), ("periodic", "true", "job"),
                                              ("aligned", "profile", "job"), ("aligned", "true", "skew")])
def test_hybrid_runs_with_the_controller_give_identical_records(tmp_path, policy, keep, sync):
    out = {}
    for core in ("native", "python"):
        sc = on_core(parse_scenario(HYBRID % (policy, keep, sync)), core)
        ctl = build_controller(sc)
        _rd, res, summary = run_scenario(sc, tmp_path / core, mode="hybrid", progress=False, controller=ctl)
        out[core] = (res, summary)
    (nat, ns), (py, ps) = out["native"], out["python"]
    assert_same(nat, py)
    assert not all(nat.simulated) and any(nat.simulated)
    assert ns["jobs"] == ps["jobs"]
    assert sum(ns["jobs"][job]["predicted_iterations"] for job in ("fast", "slow")) > 0


def test_the_controller_takes_the_native_cores_record_bursts_as_it_takes_single_records():
    """On the native core the controller gets predicted records in bursts (``Director.on_records``: the run's
    ``on_record`` is its own) with their per-iteration summary (``spans``); taking the burst's records instead of
    the summary, or fed the same run record by record (through a callback of the test's own), it ends in the same
    state, with the same records."""
    from hybridsim.hybrid import HybridController

    runs = []
    for how in ("spans", "records", "single"):
        sc = on_core(parse_scenario(HYBRID % ("aligned", "true", "job")), "native")
        ctl = build_controller(sc)
        sizes, summed = [], []
        if how != "single":
            def spy(recs, simulated, spans=None, ctl=ctl, sizes=sizes, summed=summed, keep=how == "spans"):
                sizes.append(len(recs))
                if spans is not None:  # every record counted, one span per (job, iteration)
                    keys = {(r.job_id, r.iteration) for r in recs}
                    summed.append(sum(sp[2] for sp in spans) == len(recs) and len(spans) == len(keys) and
                                  {(sp[0], sp[1]) for sp in spans} == keys)
                HybridController.on_records(ctl, recs, simulated, spans if keep else None)
            ctl.on_records = spy
            res = Engine(sc).run(director=ctl, on_record=ctl.on_record)
            assert max(sizes) > 1   # bursts did arrive
            assert summed and all(summed)   # with a summary of every record, one span per (job, iteration)
        else:
            res = Engine(sc).run(director=ctl, on_record=lambda rec, sim: ctl.on_record(rec, sim))
        runs.append((res, ctl))
    for r2, c2 in runs[1:]:
        r1, c1 = runs[0]
        assert records(r1) == records(r2) and r1.simulated == r2.simulated
        assert c1.now == c2.now
        for jid, a in c1.states.items():
            b = c2.states[jid]
            if a is None:
                assert b is None
                continue
            assert (a.lo, a.hi, a.done_count, a.n_complete, a.modes) == \
                (b.lo, b.hi, b.done_count, b.n_complete, b.modes)
            for name in ("truth", "pred", "raw"):
                assert np.array_equal(getattr(a, name), getattr(b, name), equal_nan=True), name
        strip = lambda s: {k: v for k, v in s.items() if k != "wall"}
        assert strip(c1.summary()) == strip(c2.summary())


def test_records_sink_is_the_directors_own_on_records_or_else_on_record_on_each():
    from hybridsim_common.backend import Director, Mode, records_sink
    from hybridsim_common.records import IterationRecord

    class Counting(Director):
        def __init__(self):
            self.seen, self.bursts = [], 0

        def mode_for(self, job_id, iteration):
            return Mode.SIMULATE

        def predict(self, job_id, iteration, ranks, starts):
            raise AssertionError

        def on_record(self, rec, simulated):
            self.seen.append((rec.rank, simulated))

    recs = [IterationRecord("a", 0, r, 0, 0.0, 1.0) for r in range(3)]
    d = Counting()
    assert records_sink(d, None) is None
    records_sink(d, d.on_record)(recs, False)           # the base class's on_records: on_record on each, in order
    assert d.seen == [(0, False), (1, False), (2, False)]
    other = []
    records_sink(d, lambda rec, sim: other.append(rec.rank))(recs, True)   # not the director's own: each record
    assert other == [0, 1, 2] and len(d.seen) == 3


def test_pure_run_through_the_runner_writes_the_same_tables(tmp_path):
    import pyarrow.parquet as pq
    tables = {}
    for core in ("native", "python"):
        sc = on_core(load_scenario(REPO / "examples" / "quickstart.yaml"), core)
        rd, _res, _summary = run_scenario(sc, tmp_path / core, progress=False)
        tables[core] = pq.read_table(rd.path / "iterations.parquet").to_pydict()
    assert tables["native"] == tables["python"]



@pytest.mark.parametrize("mode", ["simulate", "hybrid"])
def test_a_finished_runs_engine_and_core_are_collected(tmp_path, mode):
    """The core holds the engine's handlers and callbacks, the engine holds the core: a cycle through C++ objects,
    which the cyclic collector frees only when it sees the core's references (a GC type). Otherwise every run's
    whole network stays in the process, and a bench's hybrid runs add their peak to the pure run's."""
    import gc
    import weakref

    from hybridsim.engine.cores import NativeCore, NativeMpi

    sc = on_core(parse_scenario(HYBRID % ("aligned", "true", "job")), "native")
    ctl = build_controller(sc) if mode == "hybrid" else None
    engine = Engine(sc, progress=False)
    _rd, res, _summary = run_scenario(sc, tmp_path / mode, mode=mode, progress=False, controller=ctl, backend=engine)
    assert isinstance(engine.mpi, NativeMpi) and isinstance(engine.net.core, NativeCore)
    assert gc.is_tracked(engine.net.core)   # the collector sees the core
    alive = [weakref.ref(engine), weakref.ref(engine.mpi), weakref.ref(engine.loop), weakref.ref(engine.net)]
    assert len(res.records) == 8 * 40 + 8 * 12   # every rank x iteration of the two jobs, predicted or not
    del engine, ctl, res, _rd, _summary
    gc.collect()
    assert [r() for r in alive] == [None] * len(alive)


# ------------------------------------------------------------------------------------------------ job streams
STREAM = """\
seed: 3
topology: {groups: 3, routers_per_group: 2, terminals_per_router: 2, global_channels_per_router: 1, routing: adaptive}
sampling: {interval: 5us}
scheduler: {queue: easy, allocation: random-router, kill_at_walltime: true}
jobs:
  - {name: a, ranks: 8, iterations: 4, walltime: 70us, workload: {kind: allreduce, size: 64}, compute: {delay: 10us}}
  - {name: b, ranks: 8, iterations: 2, arrival: 1us, walltime: 100us, workload: {kind: allreduce, size: 64},
     compute: {delay: 5us}}
  - {name: c, ranks: 4, iterations: 3, arrival: 2us, walltime: 30us, workload: {kind: allreduce, size: 20000}}
  - {name: d, ranks: 6, iterations: 5, arrival: 3us, workload: {kind: nearest_neighbor, dimension_sizes: [3, 2],
                                                                 msg_size: 16384}}
"""


def test_a_job_stream_with_kills_at_the_walltime():
    nat, _ = both(lambda: parse_scenario(STREAM, "s.yaml"))
    assert nat.job_killed and len(nat.job_end) == 4


def test_stream_example():
    nat, _ = both(lambda: load_scenario(REPO / "examples" / "stream-72.yaml"))
    assert len(nat.job_end) == 12


# ------------------------------------------------------------------------------------------------ errors, selection
class Stub:
    background = False
    iterations = 1

    def __init__(self, table):
        self.table = table
        self.n_ranks = len(table)

    def ops(self, rank, iteration):
        return list(self.table[rank])


TWO = TOPO72 % "minimal" + """
jobs:
  - {name: a, ranks: 2, iterations: 1, workload: {kind: allreduce}}
placement: {policy: contiguous}
"""


def test_the_same_errors_on_both_cores():
    table = [[(ISEND, 1, 64, 0, 0), (WAITALL, (0, 7))], [(WAITALL, ())]]
    msgs = []
    for core in ("native", "python"):
        eng = Engine(on_core(parse_scenario(TWO), core), workloads=[Stub(table)])
        with pytest.raises(ValueError) as ei:
            eng.run()
        msgs.append(str(ei.value))
    assert msgs[0] == msgs[1] and "WAITALL names request 7" in msgs[0]
    msgs = []
    for core in ("native", "python"):
        sc = on_core(parse_scenario(TWO), core)
        sc.limits.max_packets_per_message = 1
        eng = Engine(sc, workloads=[Stub([[(ISEND, 1, 8000, 0, 0), (WAITALL, (0,))], [(WAITALL, ())]])])
        with pytest.raises(LimitExceeded) as ei:
            eng.run()
        msgs.append(str(ei.value))
    assert msgs[0] == msgs[1] and msgs[0].startswith("max_packets_per_message")


def test_debug_mode_checks_the_native_core_too():
    """``debug: true``: the same invariant checks on both cores (credits and buffers as they run, the whole network
    every CHECK_EVERY events, byte conservation at the end), and the same results."""
    nat, _ = both(lambda: parse_scenario(TOPO72 % "prog-adaptive" + MIXED), debug=True)
    assert nat.events > 0
    eng = Engine(on_core(parse_scenario(TOPO72 % "minimal" + MIXED), "native"), debug=True)
    eng.run()
    assert eng.core == "native"
    eng.net.check_invariants()
    eng = Engine(on_core(parse_scenario(TWO), "native"))
    eng.run()
    core = eng.net.core
    assert core.bytes_in_network() == 0 and eng.net.bytes_injected == eng.net.bytes_delivered


def test_without_the_extension_auto_falls_back_with_one_line_and_native_is_an_error(monkeypatch, capsys):
    monkeypatch.setattr(cores, "NATIVE_MISSING", "the native core is not built (test)")
    monkeypatch.setattr(cores, "_said", set())
    assert cores.choose("auto") == "python"
    assert cores.choose("auto") == "python"
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not built (test)" in err
    with pytest.raises(EngineError, match="not built"):
        cores.choose("native")
    assert cores.choose("python") == "python"


def test_energy_report_from_a_run_with_compute_kernels_is_the_same(tmp_path):
    from test_energy_energy import SCEN

    summaries = {}
    for core in ("native", "python"):
        sc = on_core(parse_scenario(TOPO72 % "minimal" + "seed: 4\n" + SCEN), core)
        _rd, res, summary = run_scenario(sc, tmp_path / core, progress=False)
        summaries[core] = (res, summary)
    (nat, ns), (py, ps) = summaries["native"], summaries["python"]
    assert_same(nat, py)
    assert ns["energy"] == ps["energy"] and ns["energy"]["jobs"]["a"]["energy_to_solution_J"] > 0


# ------------------------------------------------------------------------------------------------ the hybrid loop's Python side
def test_background_senders_run_in_the_core_with_the_engines_background_stream():
    """A uniform-random background job's periodic sends are the core's own events on the native core (no Python
    event per message), drawing the destinations from the engine's ``bg_rng``: its state after the run is the
    Python core's, and the records, events and link totals are the same (``both``)."""
    text = TOPO72 % "adaptive" + MIXED
    calls = []

    class Counting(Engine):
        def _bg_gen(self, t, rs, _=None):
            calls.append(self.core)
            super()._bg_gen(t, rs, _)
    states = []
    for core in ("native", "python"):
        eng = Counting(on_core(parse_scenario(text), core))
        eng.run()
        states.append((eng.bg_rng.getstate(), eng.rng.getstate()))
    assert states[0] == states[1]
    assert calls and set(calls) == {"python"}  # the native run never called the Python generator
    both(lambda: parse_scenario(text))


def test_a_background_job_with_its_own_destination_rule_stays_a_python_event_on_the_native_core():
    """A workload that replaces ``destination`` declares no ``destination_rule``, so the engine keeps calling it per
    message on both cores (the same records, the same background stream after the run); with a uniform job beside
    it, both stay Python events (they share the stream)."""
    from hybridsim.workloads import build_workload
    from hybridsim.workloads.simple import UniformRandomJob

    class Neighbour(UniformRandomJob):
        def destination(self, rank, k, rng):
            rng.random()
            return (rank + 1) % self.n_ranks

    text = TOPO72 % "minimal" + MIXED.replace("placement:", "  - {name: noise2, ranks: 4, workload: {kind: "
                                              "uniform_random, msg_size: 4096, interval: 2500}}\nplacement:")

    def run(core):
        sc = on_core(parse_scenario(text), core)
        wls = [build_workload(job, j, sc.seed, scenario=sc) for j, job in enumerate(sc.jobs)]
        assert wls[2].destination_rule == "uniform"
        wls[2] = Neighbour(wls[2].name, wls[2].n_ranks, sc.jobs[2].workload)
        assert wls[2].destination_rule is None and wls[3].destination_rule == "uniform"
        eng = Engine(sc, workloads=wls)
        return eng.run(), eng
    (nat, ne), (py, pe) = run("native"), run("python")
    assert not ne.native_bg
    assert_same(nat, py)
    from hybridsim.engine.engine import background_seed
    fresh = random.Random(background_seed(5)).getstate()  # MIXED's seed: the Python destination drew from it
    assert ne.bg_rng.getstate() == pe.bg_rng.getstate() != fresh


def test_counters_in_one_call_are_the_flat_views_on_both_cores():
    """``net.counters()`` (one call per port sample) holds the same numbers as the per-counter flat views, and the
    two cores agree after the same run."""
    got = {}
    for core in ("native", "python"):
        eng = Engine(on_core(parse_scenario(TOPO72 % "adaptive" + MIXED), core))
        eng.run()
        net = eng.net
        c = net.counters()
        for name, attr in cores.Network.COUNTERS.items():
            assert np.array_equal(np.asarray(c[name]), np.asarray(getattr(net, attr))), (core, name)
        got[core] = {name: np.asarray(c[name]) for name in cores.Network.COUNTERS}
    for name in cores.Network.COUNTERS:
        assert np.array_equal(got["native"][name], got["python"][name]), name
    assert got["python"]["bytes"].sum() > 0


def test_the_engines_record_maker_makes_the_dataclasss_record():
    from hybridsim.engine.engine import _new_record
    from hybridsim_common.records import IterationRecord

    a = _new_record("milc", 1, 7, 3, 12.5, 99.25)
    b = IterationRecord("milc", 1, 7, 3, 12.5, 99.25)
    assert type(a) is IterationRecord and a == b and hash(a) == hash(b) and repr(a) == repr(b)
    with pytest.raises(AttributeError):
        a.end = 0.0  # still frozen


class Staggered:
    """A director that predicts every iteration after the first, each rank ``local`` taking 15 us x (1 + local / 4):
    the fast ranks of a job wait at the next predicted iteration (parked) while its slow ones are still in theirs.
    It records what the director sees, to compare the two cores' calls."""

    keep_background = False

    def __init__(self):
        self.calls = []

    def mode_for(self, job_id, iteration):
        self.calls.append(("mode", job_id, iteration))
        from hybridsim_common.backend import Mode
        return Mode.SIMULATE if iteration == 0 else Mode.PREDICT

    def predict(self, job_id, iteration, ranks, starts):
        self.calls.append(("predict", job_id, iteration, tuple(ranks.tolist()), tuple(starts.tolist())))
        return 15e3 * (1.0 + np.asarray(ranks) / 4.0)

    def on_job_start(self, job_id, t, terminals):
        self.calls.append(("start", job_id, t))

    def on_job_end(self, job_id, t):
        self.calls.append(("end", job_id, t))

    def on_record(self, rec, simulated):
        self.calls.append(("record", rec.job_id, rec.rank, rec.iteration, rec.start, rec.end, simulated))


def test_predicted_iterations_parked_in_the_core_and_killed_at_the_walltime():
    """On the native core predicted iterations end and their ranks wait for the next prediction in the core (records
    handed over in batches): a job stream whose jobs are killed at their walltime while some ranks are parked and
    others still predicted gives the same records, the same director calls in the same order (records included),
    and the same kills as the Python core."""
    out = {}
    for core in ("native", "python"):
        d = Staggered()
        eng = Engine(on_core(parse_scenario(STREAM, "s.yaml"), core))
        out[core] = (eng.run(director=d, on_record=d.on_record), d.calls)
    (nat, ncalls), (py, pcalls) = out["native"], out["python"]
    assert_same(nat, py)
    assert ncalls == pcalls
    assert nat.job_killed and sum(not s for s in nat.simulated) > 10
    assert any(c[0] == "predict" for c in ncalls)


def test_port_samples_are_the_features_computed_column_by_column():
    """PortSampler writes each feature into its float32 column (no stack of columns): the values are those of an
    independent computation from the counters, feature by feature in float64, then cast to float32."""
    from hybridsim.engine.sampling import PortSampler

    for core in ("native", "python"):
        eng = Engine(on_core(parse_scenario(TOPO72 % "adaptive" + MIXED), core))
        eng.run()
        net, NV, P = eng.net, eng.net.nv, eng.net.P
        t1 = eng.loop.now
        t0 = t1 / 2
        s = PortSampler(net, t0)
        s.t0 = t0  # a window [t0, t1) starting from zeroed previous counters
        got = s.sample(t1).values[0]
        c = net.counters()
        by = np.asarray(c["bytes"], float)
        bs = np.asarray(c["busy_start"], float)
        occ = np.asarray(c["occ"], float).reshape(-1, NV)
        integ = np.asarray(c["occ_int"], float).reshape(-1, NV) + occ * (t1 - np.asarray(c["occ_t"], float).reshape(-1, NV))
        cap = np.asarray(net.cap, float)[:, None]
        want = [by, np.asarray(c["busy_acc"], float) + np.where(bs >= 0, t1 - bs, 0.0),
                by / (np.asarray(net.bw_bpns, float) * (t1 - t0)) * 100.0, np.asarray(c["stalled"], float),
                np.array([sum(row) for row in occ]) * P, np.asarray(c["qcount"], float) * P,
                np.asarray(c["pkts"], float)]
        for k in range(NV):
            want += [integ[:, k] / (t1 - t0) * P, occ[:, k] * P, (cap[:, 0] - occ[:, k]) * P]
        want = np.stack(want, axis=1).astype(np.float32)
        assert got.dtype == np.float32 and np.array_equal(got, want), core
        assert want[:, 0].sum() > 0 and len(s.features) == want.shape[1]


def test_native_sampler_kernel_gives_numpys_windows_and_refuses_other_arrays():
    """The native core computes a window's features itself (``sample_ports``): over successive windows (previous
    values carried from window to window, open busy and occupancy intervals growing with t) it writes the very
    float32 values of the numpy path reading the same counters; ``combined()`` is the stack of the windows' blocks,
    past the growth of its buffer; arrays of another dtype are refused, never silently copied (the previous values
    would be lost)."""
    from hybridsim.engine.sampling import PortSampler

    eng = Engine(on_core(parse_scenario(TOPO72 % "adaptive" + MIXED), "native"))
    eng.run()
    net = eng.net
    assert net.sample_ports is not None
    kernel, numpy_ = PortSampler(net, 1.0), PortSampler(net, 1.0)
    numpy_._native = None
    t_end = eng.loop.now
    for k in range(1, 21):  # 20 windows: the buffer of 8 grows twice
        t = t_end * k / 20 + (k > 10) * 1234.5
        a, b = kernel.sample(t).values, numpy_.sample(t).values
        assert a.dtype == b.dtype == np.float32 and np.array_equal(a, b, equal_nan=True), k
    assert np.array_equal(kernel.prev, numpy_.prev) and np.array_equal(kernel.prev_int, numpy_.prev_int)
    assert kernel.blocks[0].values[0, :, 0].sum() > 0  # the first window carries the run's bytes
    comb = kernel.combined()
    assert comb.values.shape == (20, net.n_ports, len(kernel.features))
    assert np.array_equal(comb.values, np.concatenate([blk.values for blk in kernel.blocks]))
    assert np.array_equal(comb.t_end, np.concatenate([blk.t_end for blk in kernel.blocks]))
    out = np.empty((net.n_ports, len(kernel.features)), np.float32)
    with pytest.raises(TypeError):
        net.sample_ports(t_end + 1.0, 1.0, kernel.bw, kernel.cap, kernel.prev.astype(np.float32), kernel.prev_int, out)
    with pytest.raises(ValueError):
        net.sample_ports(t_end + 1.0, 1.0, kernel.bw, kernel.cap, kernel.prev, kernel.prev_int, out[:, :5].copy())


def test_the_native_sampling_event_gives_the_per_window_path_and_stops_at_the_limit():
    """Where nobody reads the windows as the run goes, the native core runs the sampling event itself (no Python call
    per window): the same windows, values, event count and records as the per-window Python event (forced by an
    ``on_samples`` listener), and the same limit error at the same window."""
    out = {}
    for listen in (False, True):
        seen = []
        eng = Engine(on_core(parse_scenario(TOPO72 % "adaptive" + MIXED), "native"))
        res = eng.run(on_samples=seen.append if listen else None)
        assert (eng.sampler._pull is None) and eng.net.sample_count() == 0   # released, nothing left behind
        out[listen] = (res, seen)
    (nat, none_seen), (per, seen) = out[False], out[True]
    assert not none_seen and len(seen) == len(per.ports.t_end)
    py = Engine(on_core(parse_scenario(TOPO72 % "adaptive" + MIXED), "python")).run()
    assert_same(nat, py)
    assert_same(per, py)
    assert nat.events == per.events and len(nat.ports.t_end) > 5
    for blk, ref in zip(seen, per.ports.values):
        assert np.array_equal(blk.values[0], ref)
    errors = {}
    for listen in (False, True):
        sc = on_core(parse_scenario(TOPO72 % "adaptive" + MIXED), "native")
        sc.limits.max_samples = 3 * 252   # 3 windows x 252 ports
        eng = Engine(sc)
        with pytest.raises(LimitExceeded) as e:
            eng.run(on_samples=(lambda b: None) if listen else None)
        errors[listen] = (str(e.value), len(eng.sampler.blocks), eng.loop.events)
    assert errors[False] == errors[True] and errors[False][1] == 3 and "max_samples" in errors[False][0]


def test_the_tables_only_network_has_the_full_ones_tables():
    """What the native core reads from a Python network built with ``state=False`` (no VC buffers, no handlers) is
    what a full one holds: constants, per-port values, routing tables (as port ids) and the terminals' VCs."""
    from hybridsim.engine.core import EventLoop
    from hybridsim.engine.network import Network

    sc = parse_scenario(TOPO72 % "adaptive" + MIXED)
    topo = sc.build_topology()
    full = Network(topo, sc.topology, EventLoop(), random.Random(1))
    lite = Network(topo, sc.topology, EventLoop(), random.Random(1), state=False)
    assert lite.tvc is None and all(pt.vcs == () for pt in lite.ports) and full.ports[0].vcs
    for name in ("a", "p", "g", "radix", "nv", "P", "n_ports", "port_class", "bw_bpns", "nspb_nominal",
                 "delay_nominal", "n_terminals", "tcap", "routing", "cap", "credit_delay", "t_nspb", "t_lat",
                 "reach"):
        assert getattr(lite, name) == getattr(full, name), name
    for name in ("cap", "nspb", "delay", "dest", "to_term", "local"):
        assert [getattr(p, name) for p in lite.ports] == [getattr(p, name) for p in full.ports], name
    pids = lambda tables: [{G: [p.pid for p in c] for G, c in t.items()} for t in tables]
    assert pids(lite.gports) == pids(full.gports) and pids(lite.lgw) == pids(full.lgw)
    assert [[p.pid if p else None for p in lp] for lp in lite.lport] == \
        [[p.pid if p else None for p in lp] for lp in full.lport]
    assert [tm.router for tm in lite.terms] == [tm.router for tm in full.terms]
    assert [vc.port.pid * full.nv + vc.v for vc in full.tvc] == \
        [pid * lite.nv + lite.vc_dest for pid in topo.terminal_port_ids.tolist()]


def test_the_native_core_hands_predicted_records_over_as_columns():
    """The native core hands the records of predicted iterations over as columns (no Python object a record): the
    run's records are an IterationColumns whose predicted rows read back as the records the Python core makes, and
    whose columns are those records' fields."""
    from hybridsim_common.records import IterationColumns, IterationRecord

    runs = {}
    for core in ("native", "python"):
        d = Staggered()
        runs[core] = Engine(on_core(parse_scenario(STREAM, "s.yaml"), core)).run(director=d, on_record=d.on_record)
    nat = runs["native"]
    assert isinstance(nat.records, IterationColumns)
    made = [r for r, s in zip(nat.records, nat.simulated) if not s]
    assert len(made) > 10 and all(type(r) is IterationRecord for r in made)
    assert list(nat.records) == list(runs["python"].records) and list(nat.simulated) == list(runs["python"].simulated)
    c = nat.records.columns()
    for k, f in enumerate(("job_id", "rank", "iteration", "start", "end")):
        assert c[f].tolist() == [getattr(r, f) for r in nat.records], f
    assert c["simulated"].tolist() == list(nat.simulated)


def test_the_native_stand_in_load_is_loaded_ports_value_for_value():
    """``set_port_loads`` (the native core's stand-in load) sets each port's ns per byte and hop delay to what
    :func:`~hybridsim.engine.network.loaded_ports` computes from the nominal values, bit for bit: loads of zero,
    below zero, above the cap and NaN included, with and without a measured queued work; ports not named keep
    theirs."""
    from hybridsim.engine.core import EventLoop
    from hybridsim.engine.network import MAX_BACKGROUND_UTILISATION, Network, loaded_ports

    sc = parse_scenario(TOPO72 % "adaptive" + MIXED)
    topo = sc.build_topology()
    net = cores.build("native", topo, sc.topology, random.Random(1))[1]
    ref = Network(topo, sc.topology, EventLoop(), random.Random(1))
    rng = np.random.default_rng(11)
    for k in range(30):
        pids = np.sort(rng.choice(net.n_ports, size=int(rng.integers(1, net.n_ports)), replace=False))
        u = rng.uniform(-0.2, 1.5, len(pids))
        u[rng.uniform(size=len(pids)) < 0.15] = 0.0
        u[rng.uniform(size=len(pids)) < 0.05] = np.nan
        u[rng.uniform(size=len(pids)) < 0.05] = MAX_BACKGROUND_UTILISATION
        w = rng.uniform(0.0, 500.0, len(pids)) if k % 2 else None   # measured queued work (ns), every other time
        net.set_port_background(pids, u, w)
        ref.set_port_background(pids.tolist(), u.tolist(), None if w is None else w.tolist())
        want_s, want_d = loaded_ports(np.asarray(ref.nspb_nominal)[pids], np.asarray(ref.delay_nominal)[pids],
                                      ref.P, u, w)
        got = net.counters()["nspb"]
        assert np.array_equal(got[pids], np.array(want_s), equal_nan=True), k
        assert np.array_equal(got, np.array(ref.nspb), equal_nan=True), k   # every port as the Python network
        assert np.array_equal(np.array([ref.ports[p].delay for p in pids]), np.array(want_d), equal_nan=True)
    assert np.isnan(got).any() and (got == np.array(ref.nspb_nominal)).any()
    with pytest.raises(IndexError):
        net.set_port_background([net.n_ports], [0.5])


def test_simulated_records_in_bursts_show_each_director_call_what_one_call_per_record_does():
    """A :class:`Director` whose own ``on_record`` is the run's gets its simulated records in one ``on_records`` call
    (a ``RecordRows``) before each of its other calls and at the run's end: on both cores, a job stream with kills
    and predicted iterations gives the director the same calls, records included, in the same order, as the same
    director fed record by record (an ``on_record`` that is not its own), and the same run."""
    from hybridsim_common.backend import Director
    from hybridsim_common.records import RecordRows

    class Bursts(Staggered, Director):
        def __init__(self):
            super().__init__()
            self.rows = 0

        def on_records(self, records, simulated, spans=None):
            if type(records) is RecordRows:
                assert simulated and len(records) == len(records.rows)
                self.rows += len(records)
            super().on_records(records, simulated, spans)

    for core in ("native", "python"):
        runs = {}
        for how in ("bursts", "each"):
            d = Bursts()
            cb = d.on_record if how == "bursts" else (lambda rec, sim, d=d: d.on_record(rec, sim))
            res = Engine(on_core(parse_scenario(STREAM, "s.yaml"), core)).run(director=d, on_record=cb)
            runs[how] = (res, d)
        (rb, db), (re_, de) = runs["bursts"], runs["each"]
        assert records(rb) == records(re_) and rb.simulated == re_.simulated and rb.events == re_.events
        assert db.calls == de.calls
        n_sim = sum(1 for c in db.calls if c[0] == "record" and c[6])
        assert n_sim > 0 and db.rows == n_sim and de.rows == 0
        assert any(c[0] == "predict" for c in db.calls) and any(c[0] == "end" for c in db.calls)
