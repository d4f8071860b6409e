"""``surrogate.load(spec)``: the one resolver of model specs (name, ``name:k=v``, checkpoint folder, ``NAME=FOLDER``)
the runner, the CODES director, the gRPC surrogate service and evaluate share."""

from __future__ import annotations

import json

import pytest

import surrogate
from surrogate.base import SurrogateError, UnknownModelError
from surrogate.loading import CKPT_FORMAT, is_checkpoint_spec, parse_options
from surrogate.registry import create


def test_a_name_with_options_gives_fresh_instances():
    src = surrogate.load("ridge:k=8,alpha=0.5")
    assert not src.is_checkpoint and (src.name, src.config) == ("ridge", {"k": 8, "alpha": 0.5})
    a, b = src.new(), src.for_job("A")
    assert a is not b and a.config()["k"] == b.config()["k"] == 8 and a.config()["alpha"] == 0.5
    # options given apart (scenario config, --model-option) win over the spec's own
    assert surrogate.load("ridge:k=8", {"k": 3}).new().config()["k"] == 3


def test_bad_names_and_options():
    with pytest.raises(UnknownModelError, match="unknown surrogate model 'nosuch'"):
        surrogate.load("nosuch")
    with pytest.raises(SurrogateError, match=r"bad options for model 'ridge' \(k=abc\)"):
        surrogate.load("ridge:k=abc").new()
    with pytest.raises(SurrogateError, match="expects KEY=VALUE, got 'k'"):
        surrogate.load("ridge:k")


def test_one_rule_for_is_it_a_folder(tmp_path):
    (tmp_path / "ck").mkdir()
    assert is_checkpoint_spec("./ck") and is_checkpoint_spec("runs/ck") and is_checkpoint_spec("~/ck")
    assert not is_checkpoint_spec("ck") and not is_checkpoint_spec("ridge:k=4")
    assert is_checkpoint_spec("ck", base_dir=tmp_path)     # an existing folder next to the scenario
    assert parse_options(["k=4", "x=1.5", "flag=true", "s=abc"]) == {"k": 4, "x": 1.5, "flag": True, "s": "abc"}


def test_single_model_checkpoint(tmp_path):
    create("ridge", k=5).save(tmp_path / "ck")
    for spec, base in ((str(tmp_path / "ck"), None), ("ck", tmp_path), ("ridge=ck", tmp_path)):
        src = surrogate.load(spec, base_dir=base)
        assert src.is_checkpoint and src.name == "ridge" and src.path == tmp_path / "ck"
        a, b = src.for_job("A"), src.for_job("B")
        assert a is not b and a.config()["k"] == b.config()["k"] == 5     # a copy per job
    with pytest.raises(SurrogateError, match="checkpoint is of model 'ridge', not 'mean'"):
        surrogate.load("mean=ck", base_dir=tmp_path)
    with pytest.raises(SurrogateError, match="cannot be applied to a checkpoint"):
        surrogate.load("ck", {"k": 2}, base_dir=tmp_path)
    with pytest.raises(SurrogateError, match="checkpoint not found"):
        surrogate.load("./missing", base_dir=tmp_path)


def test_per_job_checkpoint(tmp_path):
    ck = tmp_path / "ck"
    create("last").save(ck / "A")
    (ck / "train.json").write_text(json.dumps({"format": CKPT_FORMAT, "model": "last", "jobs": {"A": "A"}}))
    src = surrogate.load(str(ck))
    assert set(src.trained) == {"A"} and src.for_job("A") is src.trained["A"]
    with pytest.raises(SurrogateError, match="no trained model for job 'B'"):
        src.for_job("B")
    with pytest.raises(SurrogateError, match="one model per job"):
        src.new()                                       # a single-model caller (director, gRPC service)
