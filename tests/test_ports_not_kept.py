"""Port samples that nobody writes or reads are not kept (issue 31, the 8,320-node memory target): the engine's
``keep_ports=False`` runs the same sampling events at the same places (same records, event counts, job ends, link
totals; ``max_samples``, a memory bound, counts only kept samples) on both cores and returns no samples; the runner keeps them
only where ``ports.parquet`` is written or a surrogate reads them. The native half is skipped by name when the
extension is not built."""

import numpy as np
import pytest

from hybridsim.engine import Engine, LimitExceeded
from hybridsim.engine import cores
from hybridsim.runner import run_scenario
from hybridsim.scenario import parse_scenario
from hybridsim_common.rundir import PORTS

SCENARIO = """
seed: 7
topology: {groups: 9, routers_per_group: 4, terminals_per_router: 2, global_channels_per_router: 2, routing: adaptive}
jobs:
  - {name: milc, ranks: 36, iterations: 3, workload: {kind: milc, dimension_sizes: [3, 3, 2, 2], msg_size: 49152}}
  - {name: nn, ranks: 24, iterations: 3, workload: {kind: nearest_neighbor, dimension_sizes: [4, 3, 2],
                                                    msg_size: 4096}}
  - {name: noise, ranks: 8, workload: {kind: uniform_random, msg_size: 20000, interval: 5000}}
placement: {policy: random}
sampling: {interval: 20us}
"""

CORES = ["python", pytest.param("native", marks=pytest.mark.skipif(
    cores.NativeCore is None, reason="native core not built (hybridsim.engine.native._core): `python setup.py "
                                     "build_ext --inplace` or `pip install -e .` with a C++17 compiler"))]


def scenario(core, **limits):
    sc = parse_scenario(SCENARIO)
    sc.backend.embedded.core = core
    sc.backend.embedded.progress = False
    for k, v in limits.items():
        setattr(sc.limits, k, v)
    return sc


def rows(res):
    return [(r.job, r.rank, r.iteration, r.start, r.end) for r in res.records]


@pytest.mark.parametrize("core", CORES)
def test_samples_not_kept_leave_every_result_as_it_was(core):
    kept = Engine(scenario(core)).run()
    eng = Engine(scenario(core), keep_ports=False)
    dropped = eng.run()
    assert kept.ports is not None and len(kept.ports.t_end) > 5   # the windows exist: the run is long enough
    assert dropped.ports is None
    assert eng.sampler.n_windows == len(kept.ports.t_end)         # the same windows were taken, their values not
    assert eng.sampler._rows.nbytes == 0
    assert rows(dropped) == rows(kept)
    assert (dropped.events, dropped.end_time, dropped.job_end) == (kept.events, kept.end_time, kept.job_end)
    for key, val in kept.link_totals.items():
        assert np.array_equal(np.asarray(dropped.link_totals[key]), np.asarray(val)), key


@pytest.mark.parametrize("core", CORES)
def test_a_listener_still_gets_the_windows(core):
    seen = []
    res = Engine(scenario(core), keep_ports=False).run(on_samples=seen.append)
    ref = Engine(scenario(core)).run()
    assert len(seen) == len(ref.ports.t_end) and res.ports is not None
    for blk, want in zip(seen, ref.ports.values):
        assert np.array_equal(blk.values[0], want)


@pytest.mark.parametrize("core", CORES)
def test_the_sample_limit_bounds_only_the_samples_a_run_keeps(core):
    """limits.max_samples is a memory bound: a run that keeps its samples stops at the limit, one that keeps none takes
    the same windows, events for events, and is not stopped (an 8,320-node run was, after 1,088 CPU-s, by samples it
    never stored)."""
    free = Engine(scenario(core), keep_ports=False).run()
    capped = Engine(scenario(core, max_samples=3 * 252), keep_ports=False).run()   # 3 windows x 252 ports
    assert capped.events == free.events and capped.end_time == free.end_time and capped.job_end == free.job_end
    eng = Engine(scenario(core, max_samples=3 * 252), keep_ports=True)
    with pytest.raises(LimitExceeded, match="max_samples"):
        eng.run()
    assert eng.sampler.n_windows == 3


def test_the_runner_keeps_samples_only_where_it_writes_them(tmp_path):
    sc = scenario("python")
    sc.output.ports = False
    _, quiet, qsum = run_scenario(sc, tmp_path / "quiet")
    sc2 = scenario("python")
    _, loud, lsum = run_scenario(sc2, tmp_path / "loud")
    assert quiet.ports is None and not (tmp_path / "quiet" / PORTS).exists()
    assert loud.ports is not None and (tmp_path / "loud" / PORTS).exists()
    assert rows(quiet) == rows(loud) and qsum["events"] == lsum["events"] and qsum["jobs"] == lsum["jobs"]
