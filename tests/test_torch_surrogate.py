"""The torch models' shared base (surrogate/torch_surrogate.py): checkpoints keep their bytes, SmartNoLLM is Smart
without the LLM's options, online tuning is the loop each model had."""

from __future__ import annotations

import copy
import inspect

import numpy as np
import pytest
import torch

from surrogate.base import Context, SurrogateError
from surrogate.loading import load_surrogate
from surrogate.models.pretrained import CLIP, LOOKBACK, SHIPPED, Pretrained, features, input_mask
from surrogate.models.smart import LLM_OPTIONS, Smart, SmartNoLLM
from surrogate.registry import BUILTIN, check_config, model_class
from surrogate.torch_surrogate import TorchSurrogate, fit_loop


def _contexts(n=6, R=12, seed=0):
    rng = np.random.default_rng(seed)
    for i in range(n):
        h = 1e5 * (1 + 0.2 * rng.random((R, LOOKBACK)))
        h[i % R, : i % LOOKBACK] = np.nan                     # a rank with a short look-back
        yield Context("j", ("milc", "lammps", "allreduce", "custom")[i % 4], h, iteration=10 + i)


def test_the_shipped_checkpoint_loads_and_predicts_as_its_weights_say():
    """Loaded through the checkpoint reader (config.json + model.safetensors, TorchSurrogate._load_state), the shipped
    model predicts what a plain torch forward of the stored tensors gives, and what the packaged default gives."""
    from safetensors.torch import load_file

    sd = {k: v.double() for k, v in load_file(str(SHIPPED / "model.safetensors")).items()}
    mask = torch.from_numpy(input_mask("history,kind")).double()
    gelu = torch.nn.GELU()
    loaded, default = load_surrogate(SHIPPED), Pretrained()
    assert isinstance(loaded, TorchSurrogate) and loaded.config()["inputs"] == "history,kind"
    for ctx in _contexts():
        X, level = features(ctx.history, ctx.columns, ctx.iteration, ctx.info, ctx.load, ctx.load_now, ctx.workload)
        z = torch.from_numpy(X).double() * mask
        z = gelu(z @ sd["body.0.weight"].T + sd["body.0.bias"])
        z = gelu(z @ sd["body.2.weight"].T + sd["body.2.bias"])
        z = (z @ sd["out.weight"].T + sd["out.bias"])[:, 0].clamp(-CLIP, CLIP)
        expect = np.exp(level + z.numpy())
        np.testing.assert_allclose(loaded.predict(ctx), expect, rtol=1e-12)
        np.testing.assert_array_equal(loaded.predict(ctx), default.predict(ctx))


def test_saving_the_shipped_checkpoint_writes_the_same_bytes(tmp_path):
    load_surrogate(SHIPPED).save(tmp_path / "again")
    assert (tmp_path / "again" / "model.safetensors").read_bytes() == (SHIPPED / "model.safetensors").read_bytes()


def test_weights_that_do_not_fit_are_a_clean_error(tmp_path):
    from safetensors.torch import save_file

    save_file({"body.0.weight": torch.zeros(3, 3)}, str(tmp_path / "w.safetensors"))
    with pytest.raises(SurrogateError, match="pretrained: checkpoint weights do not fit a .*-feature, 64-wide net"):
        Pretrained(weights=str(tmp_path / "w.safetensors"))
    with pytest.raises(SurrogateError, match="smart: checkpoint has weights but no topology"):
        Smart()._load_state({"x": torch.zeros(1)})


def test_smart_nollm_takes_smarts_options_but_the_llms():
    smart = set(inspect.signature(Smart).parameters)
    assert set(inspect.signature(SmartNoLLM).parameters) == smart - set(LLM_OPTIONS)
    assert set(LLM_OPTIONS) < smart
    check_config("smart-nollm", {"hidden": 8, "tune_steps": 2})
    for key in ("llm_path", "d_model"):
        with pytest.raises(SurrogateError, match=f"unknown config key '{key}'"):
            check_config("smart-nollm", {key: 1})
        with pytest.raises(SurrogateError, match=f"unknown config key '{key}'"):
            SmartNoLLM(**{key: 1})
    cfg = SmartNoLLM(hidden=8, lookback=4).config()
    assert cfg["hidden"] == 8 and cfg["lookback"] == 4 and not set(cfg) & set(LLM_OPTIONS)
    assert SmartNoLLM(**cfg).config() == cfg


def test_every_builtin_model_is_registered_under_its_own_name():
    for name, where in BUILTIN.items():
        cls = model_class(name)
        assert cls.name == name and f"{cls.__module__}:{cls.__qualname__}" == where


def test_tune_without_shuffling_steps_through_the_window_in_order():
    """fit_loop(shuffle=False) with one batch per pass is the plain loop: Adam steps on all targets, in order."""
    seen = []
    w = torch.nn.Linear(1, 1)

    def loss(items):
        seen.append(list(items))
        return (w(torch.tensor([[float(len(items))]])) ** 2).mean()

    info = fit_loop(w, loss, np.array([5, 3, 9]), None, epochs=3, lr=1e-3, batch_size=3, early_stopping=False,
                    shuffle=False)
    assert seen == [[5, 3, 9]] * 3 and info["epochs"] == 3


def test_a_copy_shares_what_is_shared_and_copies_the_rest():
    class Toy(TorchSurrogate):
        name = "toy"
        shared = ("frozen",)

        def __init__(self):
            self.frozen = torch.nn.Linear(2, 2)
            self.net = torch.nn.Sequential(self.frozen, torch.nn.Linear(2, 1))

        def predict(self, ctx):
            return np.zeros(1)

    a = Toy()
    b = copy.deepcopy(a)
    assert b.frozen is a.frozen and b.net[0] is a.frozen     # shared, also inside the network
    assert b.net is not a.net and b.net[1] is not a.net[1]
    with torch.no_grad():
        b.net[1].weight.add_(1.0)
    assert not torch.equal(a.net[1].weight, b.net[1].weight)
