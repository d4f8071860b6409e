"""Live CODES: the defaults run hybrid (issue 33 item 2). The live scenario with no controller section (confident,
the default policy, in its plan-ahead form: controllers/ahead.py), no surrogate section and the default stand-in
(load): ``hybridsim bench`` runs pure CODES, the floor and the hybrid run through CODES' director, and the promise of
the default policy -- every job within its ``target_error`` (2 %) of pure CODES -- is checked against the pure run.
Needs a CODES built by scripts/build-codes.sh (``CODES_BIN_DIR``); skipped by name without one (conftest.py)."""

from __future__ import annotations

import json

import yaml

from test_codes_live import DIRECTOR_TIMEOUT_S, _codes_backend, _hybridsim, _scenario_dict

#: confident's default target_error (% of each job's completion time)
TARGET_PCT = 2.0


def test_the_defaults_run_hybrid_on_codes_and_keep_the_promise(tmp_path):
    doc = _scenario_dict(_codes_backend("sequential"))
    assert "controller" not in doc and "surrogate" not in doc
    scen = tmp_path / "defaults.yaml"
    scen.write_text(yaml.safe_dump(doc, sort_keys=False))
    val = _hybridsim("validate", str(scen))
    assert "--mode hybrid is refused" not in val.stderr
    out = tmp_path / "bench"
    _hybridsim("bench", str(scen), "-o", str(out), "--no-progress", timeout=3 * DIRECTOR_TIMEOUT_S)
    (run,) = json.loads((out / "bench.json").read_text())["runs"]
    assert run["run"] == "00-confident" and run["standin"]["mode"] == "load"
    (hyb,) = [d for d in out.iterdir() if d.name.startswith("00-")]
    director = json.loads((hyb / "summary.json").read_text())["backend_stats"]["director"]
    # the plan-ahead form: warm-up of 8, MILC (20 iterations) predicted from there, LAMMPS (10: fewer than 8 after
    # its warm-up) simulated throughout; CODES' windows are shared by iteration number, and one opening at LAMMPS'
    # last mark (9) would switch LAMMPS there (a phantom iteration), so it opens at 11 (MILC 8-10 simulated: off the
    # plan)
    assert director["windows"] == [[11, 20]] and director["mismatch"] == {"milc": [8, 9, 10], "lammps": []}
    assert "truth_only" not in director
    assert run["jobs"]["milc"]["surrogate_fraction"] == 9 / 20 and run["jobs"]["lammps"]["surrogate_fraction"] == 0
    for name, job in run["jobs"].items():
        assert abs(job["completion_error_signed_pct"]) <= TARGET_PCT, (name, job["completion_error_signed_pct"])
    assert run["events_hybrid"] < run["events_pure"]
