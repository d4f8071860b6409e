"""The oracle surrogate (surrogate/models/oracle.py): a pure run's own times, the floor of every accuracy table."""

import numpy as np
import pytest

from hybridsim.runner import build_controller, run_scenario
from hybridsim.scenario import parse_scenario
from surrogate.base import SurrogateError
from surrogate.loading import is_checkpoint_spec

SC = """
seed: 3
topology: {groups: 3, routers_per_group: 2, terminals_per_router: 2, global_channels_per_router: 1}
jobs:
  - {name: a, ranks: 4, iterations: 40, workload: {kind: allreduce, size: 4096}}
placement: {policy: random}
surrogate: {model: last}
controller: {policy: aligned, params: {warmup: 1, ft: 8, truth: 1}, sync: rank}
"""


@pytest.fixture(scope="module")
def pure(tmp_path_factory):
    sc = parse_scenario(SC)
    path = tmp_path_factory.mktemp("oracle") / "pure"
    _, res, summary = run_scenario(sc, path, mode="simulate", progress=False)
    table = np.full((4, 40), np.nan)
    for r in res.records:
        table[r.rank, r.iteration] = r.end - r.start
    return sc, path, table, summary


def _with_oracle(sc, path):
    sc2 = sc.model_copy(deep=True)
    sc2.surrogate.model = f"oracle:run={path}"
    return sc2


def test_oracle_answers_the_pure_times_and_reproduces_completion(pure, tmp_path):
    """Every prediction is the pure run's time of that rank and iteration, exactly; the hybrid run then completes
    within 1e-3 % of the pure run (what is left: the truth windows start on an empty network; 4e-5 % measured)."""
    sc, path, table, psum = pure
    sc2 = _with_oracle(sc, path)
    ctl = build_controller(sc2)
    _, _, hsum = run_scenario(sc2, tmp_path / "h", mode="hybrid", progress=False, controller=ctl)
    st = ctl.states[0]
    predicted = [i for i, m in enumerate(st.modes) if m.value == "predict"]
    assert len(predicted) >= 30
    assert np.array_equal(st.raw[:, predicted], table[:, predicted])
    tp, th = psum["jobs"]["a"]["completion_time_ns"], hsum["jobs"]["a"]["completion_time_ns"]
    assert abs(th - tp) / tp < 1e-5
    assert ctl.counts["fallback_predictions"] == 0


def test_oracle_refuses_another_scenario(pure):
    sc, path, _, _ = pure
    other = _with_oracle(sc, path)
    other.seed = 4
    with pytest.raises(SurrogateError, match=r"another scenario .*differs in seed"):
        build_controller(other)
    # the surrogate and controller sections may differ: the pure run is the same
    same = _with_oracle(sc, path)
    same.controller.params = {"warmup": 2, "ft": 4}
    build_controller(same)


def test_oracle_refuses_what_is_no_pure_run(tmp_path, pure):
    sc, path, _, _ = pure
    with pytest.raises(SurrogateError, match="not a run directory"):
        build_controller(_with_oracle(sc, tmp_path / "nothing"))
    hybrid_dir = tmp_path / "hy"
    run_scenario(_with_oracle(sc, path), hybrid_dir, mode="hybrid", progress=False)
    with pytest.raises(SurrogateError, match="not a completed pure simulation"):
        build_controller(_with_oracle(sc, hybrid_dir))


def test_a_named_model_with_a_path_option_is_no_checkpoint():
    assert not is_checkpoint_spec("oracle:run=/some/where/pure")
    assert is_checkpoint_spec("./ckpt") and is_checkpoint_spec("runs/ckpt")


# ------------------------------------------------------------------------------------- a tampered pure run (issue 35)
def _tampered(pure, tmp_path, fn, forge: bool):
    """A copy of the pure run whose iterations table went through ``fn(columns)``; ``forge``: its digest recorded
    again, as a careful forger would."""
    import shutil

    import pyarrow as pa
    import pyarrow.parquet as pq

    from hybridsim_common.rundir import refresh_digest

    d = tmp_path / "copy"
    shutil.copytree(pure[1], d)
    t = pq.read_table(d / "iterations.parquet")
    cols = fn({c: t.column(c).to_numpy(zero_copy_only=False).copy() for c in t.column_names})
    pq.write_table(pa.table(cols), d / "iterations.parquet")
    if forge:
        refresh_digest(d, "iterations.parquet")
    return d


def _end_x10(c):
    c["end"] = c["start"] + (c["end"] - c["start"]) * 10
    return c


def _nan(c):
    c["end"][3] = np.nan
    return c


def _relabelled(c):
    c["job"] = np.where(c["rank"] == 0, "b", c["job"]).astype(object)
    return c


def _dropped(c):
    return {k: v[1:] for k, v in c.items()}


@pytest.mark.parametrize("forge", [False, True], ids=["digest-kept", "digest-forged"])
@pytest.mark.parametrize("fn,why", [(_end_x10, "completed at"), (_nan, "not finite"),
                                    (_relabelled, "ranks x 40 iterations once \\(120 rows\\)"),
                                    (_dropped, "ranks x 40 iterations once")],
                         ids=["end-x10", "nan", "relabelled", "row-dropped"])
def test_oracle_refuses_a_tampered_run(pure, tmp_path, fn, why, forge):
    """End times x10, a NaN, rows relabelled or dropped: refused with the reason (bench --pure's rules); with the
    digest kept the digest says so first, with a forged one the table's own checks do."""
    sc, _, _, _ = pure
    d = _tampered(pure, tmp_path, fn, forge)
    with pytest.raises(SurrogateError, match="changed since the run completed" if not forge else why):
        build_controller(_with_oracle(sc, d))


def test_oracle_refuses_a_run_without_digests(pure, tmp_path):
    import json
    import shutil

    sc, _, _, _ = pure
    d = tmp_path / "old"
    shutil.copytree(pure[1], d)
    m = json.loads((d / "manifest.json").read_text())
    del m["digest"]
    (d / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(SurrogateError, match="records no digest"):
        build_controller(_with_oracle(sc, d))
