"""benchmarks/surrogate_mape.py: the embedded-engine runs it makes (name -> scenario) without running them."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("surrogate_mape_bench", ROOT / "benchmarks" / "surrogate_mape.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    yield mod
    sys.modules.pop(spec.name, None)


@pytest.mark.parametrize("name,placement,ranks,iterations,terminals", [
    ("e72-random", "random", {"milc": 36, "lammps": 32, "noise": 4}, {"milc": 240, "lammps": 36}, 72),
    ("e72-contiguous", "contiguous", {"milc": 36, "lammps": 32, "noise": 4}, {"milc": 240, "lammps": 36}, 72),
    ("e1056-random", "random", {"milc": 512, "lammps": 256, "nn": 256}, {"milc": 100, "lammps": 24, "nn": 100}, 1056),
    ("e1056-contiguous", "contiguous", {"milc": 512, "lammps": 256, "nn": 256},
     {"milc": 100, "lammps": 24, "nn": 100}, 1056),
])
def test_engine_scenarios(bench, name, placement, ranks, iterations, terminals):
    from hybridsim.scenario import parse_scenario

    d = bench.engine_scenario(name)
    # pure simulation with port samples: no surrogate / controller section, ports written
    assert "surrogate" not in d and "controller" not in d
    assert d["output"] == {"ports": True}
    sc = parse_scenario(yaml.safe_dump(d, sort_keys=False), f"{name}.yaml")
    assert sc.placement.policy == placement
    assert sc.output.ports is True
    assert sc.topology.n_terminals == terminals
    assert {j.name: j.ranks for j in sc.jobs} == ranks
    assert {j.name: j.iterations for j in sc.jobs if j.name in iterations} == iterations
    assert sc.sampling.interval == 250_000


def test_engine_run_names_listed_in_help(bench):
    assert set(bench.ENGINE) == {"e72-random", "e72-contiguous", "e1056-random", "e1056-contiguous"}
    for name, (example, _) in bench.ENGINE.items():
        assert (ROOT / "examples" / example).is_file(), name
