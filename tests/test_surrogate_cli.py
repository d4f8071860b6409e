"""``hybridsim dataset build`` / ``train`` / ``evaluate`` end to end on a tiny synthetic run, and exit status 2 on
bad input."""

from __future__ import annotations

import json

from hybridsim.cli import main
from surrogate.synthetic import make_synthetic_run


def test_cli_pipeline_and_errors(tmp_path, capsys):
    make_synthetic_run(tmp_path / "run", jobs=(("A", "milc", 3, 30), ("B", "nn", 2, 24)))
    ds = tmp_path / "ds"
    assert main(["dataset", "build", str(tmp_path / "run"), "-o", str(ds)]) == 0
    out = capsys.readouterr().out
    assert "A" in out and "30 iterations" in out
    assert main(["dataset", "build", str(tmp_path / "run"), "-o", str(ds)]) == 2  # not empty, no --force
    assert "--force" in capsys.readouterr().err
    assert main(["train", str(ds), "--model", "lstm", "-o", str(tmp_path / "ck"), "--set", "epochs=2",
                 "--no-progress"]) == 0
    capsys.readouterr()
    js = tmp_path / "eval.json"
    assert main(["evaluate", str(ds), "--model", "last", "--model", str(tmp_path / "ck"), "--ft", "4", "--ft", "inf",
                 "--json", str(js)]) == 0
    out = capsys.readouterr().out
    assert "lstm[ck]" in out and "last" in out
    rep = json.loads(js.read_text())
    rows = {(r["model"], r["ft"], r["job"]) for r in rep["results"]}
    assert rows == {(m, f, j) for m in ("last", "lstm[ck]") for f in (4, "inf") for j in ("A", "B")}
    assert all(r["mape"] >= 0 for r in rep["results"])
    # bad input -> exit 2 with a message
    assert main(["evaluate", str(tmp_path / "nope"), "--model", "last"]) == 2
    assert "not found" in capsys.readouterr().err
    assert main(["evaluate", str(ds), "--model", f"dcrnn={tmp_path / 'ck'}"]) == 2
    assert "not 'dcrnn'" in capsys.readouterr().err
    assert main(["train", str(ds), "--model", "nosuch", "-o", str(tmp_path / "x")]) == 2
    assert "unknown surrogate model" in capsys.readouterr().err
    assert main(["dataset", "build", str(tmp_path / "nope"), "-o", str(tmp_path / "d3")]) == 2
    (ds / "meta.json").write_text("[]")
    assert main(["dataset", "info", str(ds)]) == 2
    assert "not a hybridsim-surrogate-dataset" in capsys.readouterr().err
