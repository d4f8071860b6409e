"""Progress a person can read: the engine's bar counts rank-iterations of a known total (so tqdm shows the rate and an
ETA), and every simulation of a bench is labelled "run k/N: NAME"."""

import re

import pytest

import hybridsim.runner as runner
from hybridsim.bench import count_runs, run_bench
from hybridsim.runner import run_scenario
from hybridsim.scenario import parse_scenario

from fakes import FakeBackend

SMALL = """
name: small
seed: 1
topology: {groups: 9, routers_per_group: 4, terminals_per_router: 2, global_channels_per_router: 2}
jobs:
  - {name: a, ranks: 8, iterations: 3, workload: {kind: nearest_neighbor, dimension_sizes: [2, 2, 2], msg_size: 4096}}
  - {name: b, ranks: 4, iterations: 5, workload: {kind: allreduce}}
"""


def test_engine_bar_counts_rank_iterations_with_rate_and_eta(tmp_path, capsys):
    run_scenario(parse_scenario(SMALL), tmp_path / "run", progress=True)
    err = capsys.readouterr().err.replace("\r", "\n")
    last = [ln for ln in err.splitlines() if ln.startswith("small:")][-1]
    total = 8 * 3 + 4 * 5  # rank-iterations of the two jobs
    assert re.search(rf"\b{total}(\.0)?/{total}(\.0)? \[", last) and "100%" in last  # tqdm's unit_scale: 44.0
    assert re.search(r"\[\d\d:\d\d<\d\d:\d\d, [\d.]+k?rank-it/s", last)  # elapsed<remaining, rate
    assert "a:3/3 b:5/5" in last


def test_a_label_names_the_bar(tmp_path, capsys):
    run_scenario(parse_scenario(SMALL), tmp_path / "run", progress="run 2/7: mine")
    err = capsys.readouterr().err.replace("\r", "\n")
    assert any(ln.startswith("run 2/7: mine: 100%") for ln in err.splitlines())


SC = """
topology: {groups: 9, routers_per_group: 4, terminals_per_router: 2, global_channels_per_router: 2}
jobs:
  - {name: a, ranks: 4, iterations: 12, workload: {kind: allreduce}}
surrogate: {model: last}
controller: {policy: surrogate, params: {warmup: 4}, sync: rank}
"""


@pytest.mark.parametrize("seeds", [1, 2])
def test_every_bench_simulation_is_run_k_of_n(tmp_path, monkeypatch, seeds):
    labels = []
    real = runner.run_scenario

    def spy(*a, **k):
        labels.append(k["progress"])
        return real(*a, **k)

    monkeypatch.setattr(runner, "run_scenario", spy)
    sc = parse_scenario(SC)
    run_bench(sc, tmp_path / "b", sweep_ft=[4], surrogates=["last", "mean"], progress=True, seeds=seeds,
              baselines=["last"], backend_factory=lambda s: FakeBackend(s))
    # per seed: the pure run, then (scenario policy, Ft=4, zero-shot) x (last, mean)
    n = seeds * (1 + 3 * 2)
    assert count_runs(sc, None, [4], ["last", "mean"], seeds, False) == n
    assert [lab.split(":")[0] for lab in labels] == [f"run {k}/{n}" for k in range(1, n + 1)]
    assert labels[0] == ("run 1/7: pure" if seeds == 1 else f"run 1/{n}: seed{sc.seed}-pure")
    labels.clear()
    run_bench(sc, tmp_path / "c", surrogates=["last"], progress=False, backend_factory=lambda s: FakeBackend(s))
    assert labels == [False, False]
