"""`hybridsim validate` prints each scenario's estimate (hybridsim.estimate: events, CPU and memory, pure and
hybrid) and warns on stderr when a run needs more than an hour of CPU."""

from hybridsim.cli import LONG_RUN_S, main
from hybridsim.estimate import estimate
from hybridsim.scenario import load_scenario

LONG = """\
name: long
seed: 1
topology: {groups: 9, routers_per_group: 4, terminals_per_router: 2, global_channels_per_router: 2}
jobs:
  - {name: milc, ranks: 36, iterations: 4000, workload: {kind: milc, dimension_sizes: [3, 3, 2, 2], msg_size: 4915200}}
sampling: {ports: false}   # a window every 250 us over its >= 56 s would pass limits.max_samples
"""


def test_validate_prints_the_estimate_of_each_file(repo, capsys):
    f = repo / "examples" / "quickstart.yaml"
    assert main(["validate", str(f)]) == 0
    out, err = capsys.readouterr()
    est = estimate(load_scenario(f))
    assert out.splitlines()[1] == f"{f}: {est.line()}"
    assert "events" in out and "CPU" in out and "hybrid at best" in out
    assert est.cpu_s < LONG_RUN_S and "warning" not in err


def test_validate_warns_above_an_hour(tmp_path, capsys):
    f = tmp_path / "long.yaml"
    f.write_text(LONG)
    est = estimate(load_scenario(f))
    assert est.cpu_s > LONG_RUN_S  # the case: 4,000 iterations of MILC with 4.9 MB messages
    assert main(["validate", str(f)]) == 0  # a warning, not an error
    out, err = capsys.readouterr()
    assert f"{f}: ok" in out and f"{f}: {est.line()}" in out
    want = max(est.cpu_s, est.hybrid_cpu_s) / 3600
    assert f"{f}: warning: the run needs about {want:.1f} h of CPU" in err
