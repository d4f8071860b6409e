"""Time-LLM branch (Jin et al., ICLR 2024) as used by SMART: reprogram a look-back of iteration times into a frozen
language model.

Per row (a rank) with look-back ``x`` (L values, log iteration times)::

    x̂      = RevIN(x) = γ (x − μ) / σ + β                  instance normalisation, μ, σ over the L values
    patches = unfold(x̂, patch_len, stride)                 (T, patch_len), aligned to the newest value
    e       = W_p patches                                    (T, d_model)      patch embedding
    E'      = W_m E_vocab                                    (K, d_llm)        K text prototypes, a learned linear map of
                                                                               the frozen word-embedding matrix E_vocab
    r       = W_o MultiHead(Q = W_q e, K = W_k E', V = W_v E')   (T, d_llm)    reprogramming (cross-attention)
    h       = FrozenLM([prompt ; r])[-1]                     (d_llm,)          prompt-as-prefix, last token's state

The prompt (prompt-as-prefix) is text embedded by the frozen LM's input embeddings::

    "Dataset description: iteration times of the ranks of a <workload> job on a Dragonfly interconnect.
     Task description: forecast the next step given the previous <L> steps information; "      (shared, per workload)
    "Input statistics: min value <a>, max value <b>, median value <c>, the trend of input is <upward|downward>,
     top <k> lags are : <l1>, <l2>, ..."                                                      (per job and step)

The statistics are computed from each rank's normalised look-back x̂ and summarised over the ranks of the step
(median of the per-rank min/max/median, majority trend, most frequent top autocorrelation lags), rounded to
``prompt_decimals``: one statistics sentence per job and step, so all ranks share the prompt's cached keys/values
(per-rank sentences make gathering the prompt cache too slow on one CPU core at hundreds of ranks). The prediction head (in :class:`TimeLLM` ``head``) maps ``[h ; extra ; x̂]`` (``extra``: e.g.
SMART's node embedding; x̂ with ``linear_skip``) to the normalised next value (0 = the look-back mean), which is
de-normalised, ``ŷ = μ + σ (out − β) / γ`` (then ``exp`` by the caller in log space).

Only W_p, W_m, the reprogramming projections, RevIN's γ/β and the head train; the LM is frozen.

Shapes: ``forward(x (N, L), workload: str, extra (N, E) | None) -> (N,)`` predicted next log value.
"""

from __future__ import annotations

import math
from collections import OrderedDict

import torch
from torch import nn

from ..llm import FrozenLM


def make_head(n_in: int, hidden: int = 0) -> nn.Module:
    """Output layer: ``Linear(n_in, 1)``, or ``Linear(n_in, hidden) -> GELU -> Linear(hidden, 1)``."""
    if hidden <= 0:
        return nn.Linear(n_in, 1)
    return nn.Sequential(nn.Linear(n_in, hidden), nn.GELU(), nn.Linear(hidden, 1))


def reset_head(head: nn.Module) -> None:
    """Default init, with the last layer near zero so the untrained model predicts about the look-back mean."""
    last = head if isinstance(head, nn.Linear) else head[-1]
    if not isinstance(head, nn.Linear):
        head[0].reset_parameters()
    nn.init.normal_(last.weight, std=1e-3)
    nn.init.zeros_(last.bias)


class RevIN(nn.Module):
    """Reversible instance normalisation over the last axis: ``x̂ = γ (x − μ) / σ + β``, σ = sqrt(var + eps)."""

    def __init__(self, eps: float = 1e-8, affine: bool = True):
        super().__init__()
        self.eps, self.affine = eps, affine
        self.gamma = nn.Parameter(torch.ones(1)) if affine else None
        self.beta = nn.Parameter(torch.zeros(1)) if affine else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.affine:
            nn.init.ones_(self.gamma)
            nn.init.zeros_(self.beta)

    def norm(self, x: torch.Tensor):
        """x (N, L) -> (x̂ (N, L), μ (N, 1), σ (N, 1))."""
        mu = x.mean(dim=-1, keepdim=True)
        sigma = torch.sqrt(x.var(dim=-1, keepdim=True, unbiased=False) + self.eps)
        xn = (x - mu) / sigma
        if self.affine:
            xn = xn * self.gamma + self.beta
        return xn, mu, sigma

    def denorm(self, y: torch.Tensor, mu: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
        if self.affine:
            y = (y - self.beta) / (self.gamma + self.eps)
        return y * sigma + mu


def top_lags(x: torch.Tensor, k: int) -> torch.Tensor:
    """Top-k autocorrelation lags (1..L-1) of each row of x (N, L), via FFT as Time-LLM does -> (N, k) int64."""
    L = x.shape[-1]
    xc = x - x.mean(dim=-1, keepdim=True)
    f = torch.fft.rfft(xc, n=2 * L, dim=-1)
    corr = torch.fft.irfft(f * torch.conj(f), n=2 * L, dim=-1)[..., 1:L]
    k = min(k, L - 1)
    return torch.topk(corr, k, dim=-1).indices + 1


def prompt_statistics(xn: torch.Tensor, top_k: int = 3, decimals: int = 1) -> dict:
    """Per-row statistics of normalised look-backs xn (N, L), summarised over rows: median of the rows' min, max and
    median; majority trend (sum of first differences); the ``top_k`` most frequent top autocorrelation lags."""
    x = xn.detach().float()
    mn = float(x.min(dim=-1).values.median())
    mx = float(x.max(dim=-1).values.median())
    md = float(x.median(dim=-1).values.median())
    up = float((x[:, -1] - x[:, 0] > 0).float().mean()) >= 0.5
    lags: list[int] = []
    if x.shape[-1] > 1:
        tl = top_lags(x, top_k)
        counts = torch.bincount(tl.reshape(-1), minlength=x.shape[-1]).tolist()
        order = sorted(range(1, len(counts)), key=lambda l: (-counts[l], l))
        lags = [l for l in order if counts[l] > 0][:top_k]
    r = lambda v: f"{round(v, decimals):.{decimals}f}".replace("-0.0", "0.0") if decimals > 0 else str(round(v))
    return {"min": r(mn), "max": r(mx), "median": r(md), "trend": "upward" if up else "downward", "lags": lags}


class TimeLLM(nn.Module):
    """Time-LLM reprogramming branch on a frozen LM.

    Args:
        lm: the :class:`~surrogate.llm.FrozenLM` (kept outside the module's parameters and state).
        lookback: L.
        patch_len, stride: patching (the patches end at the newest value; T = (L - patch_len) // stride + 1).
        d_model: patch embedding size.
        n_heads, d_keys: reprogramming attention heads and per-head size.
        n_prototypes: K text prototypes.
        extra_dim: size of the extra features concatenated to the LM state before the head (0: none).
        head_hidden: 0 for a linear head (SMART's "fully connected layer"), else the width of a 2-layer GELU MLP.
        linear_skip: also feed the normalised look-back x̂ itself to the head (a linear autoregressive path beside
            the LM, so the branch can never do worse than a linear model of the look-back).
        top_k_lags, prompt_decimals: prompt statistics.
        prompt_cache: number of statistics sentences whose LM keys/values are kept.
    """

    def __init__(self, lm: FrozenLM, lookback: int = 8, patch_len: int = 4, stride: int = 4, d_model: int = 32,
                 n_heads: int = 4, d_keys: int = 16, n_prototypes: int = 64, extra_dim: int = 0,
                 linear_skip: bool = True, head_hidden: int = 0, top_k_lags: int = 3, prompt_decimals: int = 1,
                 prompt_cache: int = 256):
        super().__init__()
        if not 1 <= patch_len <= lookback or stride < 1:
            raise ValueError(f"need 1 <= patch_len <= lookback and stride >= 1 (patch_len={patch_len}, "
                             f"lookback={lookback}, stride={stride})")
        self.__dict__["lm"] = lm  # not a registered submodule: frozen, not saved, not optimised
        self.lookback, self.patch_len, self.stride = lookback, patch_len, stride
        self.n_patches = (lookback - patch_len) // stride + 1
        self.offset = lookback - ((self.n_patches - 1) * stride + patch_len)
        self.n_heads, self.d_keys, self.n_prototypes = n_heads, d_keys, n_prototypes
        self.top_k_lags, self.prompt_decimals = top_k_lags, prompt_decimals
        d_llm, V = lm.hidden_size, lm.word_embeddings.shape[0]
        self.revin = RevIN()
        self.patch_embedding = nn.Linear(patch_len, d_model)
        self.mapping = nn.Linear(V, n_prototypes)
        self.query = nn.Linear(d_model, n_heads * d_keys)
        self.key = nn.Linear(d_llm, n_heads * d_keys)
        self.value = nn.Linear(d_llm, n_heads * d_keys)
        self.out = nn.Linear(n_heads * d_keys, d_llm)
        self.linear_skip = bool(linear_skip)
        self.head = make_head(d_llm + extra_dim + (lookback if self.linear_skip else 0), head_hidden)
        self._shared: dict = {}
        self._stats: OrderedDict = OrderedDict()
        self._stats_cap = prompt_cache
        self._proto_cache = None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.revin.reset_parameters()
        for lin in (self.patch_embedding, self.mapping, self.query, self.key, self.value, self.out):
            lin.reset_parameters()
        reset_head(self.head)
        self._proto_cache = None

    def train(self, mode: bool = True):
        self._proto_cache = None
        return super().train(mode)

    def _load_from_state_dict(self, *args, **kw):
        self._proto_cache = None
        return super()._load_from_state_dict(*args, **kw)

    # ------------------------------------------------------------------------------------------------ prompt
    def shared_text(self, workload: str) -> str:
        return (f"Dataset description: iteration times of the ranks of a {workload} job on a Dragonfly "
                f"interconnect. Task description: forecast the next step given the previous {self.lookback} "
                f"steps information; ")

    @staticmethod
    def stats_text(st: dict) -> str:
        lags = ", ".join(str(l) for l in st["lags"])
        return (f"Input statistics: min value {st['min']}, max value {st['max']}, median value {st['median']}, "
                f"the trend of input is {st['trend']}, top {len(st['lags'])} lags are : {lags}")

    def _prompt(self, workload: str, xn: torch.Tensor):
        lm = self.lm
        sh = self._shared.get(workload)
        if sh is None:
            sh = self._shared[workload] = lm.encode_shared(lm.tokenize(self.shared_text(workload), add_bos=True))
        text = self.stats_text(prompt_statistics(xn, self.top_k_lags, self.prompt_decimals))
        key = (workload, text)
        st = self._stats.get(key)
        if st is None:
            ids = torch.tensor([lm.tokenize(text)], dtype=torch.long)
            mask = torch.ones_like(ids, dtype=torch.bool)
            st = (lm.encode_stats(sh, ids, mask), mask)
            self._stats[key] = st
            if len(self._stats) > self._stats_cap:
                self._stats.popitem(last=False)
        else:
            self._stats.move_to_end(key)
        return sh, st[0], st[1], text

    # ------------------------------------------------------------------------------------------- prototypes
    def prototypes(self):
        """(H, K, dk) keys and values of the text prototypes (cached while not training)."""
        if self._proto_cache is not None:
            return self._proto_cache
        W = self.lm.word_embeddings_f32  # (V, d_llm), frozen
        proto = self.mapping(W.t()).t()  # (K, d_llm)
        k = self.key(proto).view(self.n_prototypes, self.n_heads, self.d_keys).transpose(0, 1).contiguous()
        v = self.value(proto).view(self.n_prototypes, self.n_heads, self.d_keys).transpose(0, 1).contiguous()
        if not self.training and not torch.is_grad_enabled():
            self._proto_cache = (k, v)
        return k, v

    def reprogram(self, xn: torch.Tensor, protos=None) -> torch.Tensor:
        """xn (N, L) -> reprogrammed patch embeddings (N, T, d_llm). ``protos``: :meth:`prototypes` to reuse."""
        N = xn.shape[0]
        patches = xn[:, self.offset:].unfold(-1, self.patch_len, self.stride)  # (N, T, patch_len)
        e = self.patch_embedding(patches)
        H, dk, T = self.n_heads, self.d_keys, self.n_patches
        q = self.query(e).view(N * T, H, dk).transpose(0, 1)  # (H, N*T, dk)
        k, v = self.prototypes() if protos is None else protos  # (H, K, dk)
        a = torch.softmax(torch.bmm(q, k.transpose(1, 2)) / math.sqrt(dk), dim=-1)  # (H, N*T, K)
        r = torch.bmm(a, v).transpose(0, 1).reshape(N, T, H * dk)
        return self.out(r)

    # ----------------------------------------------------------------------------------------------- forward
    def hidden(self, xn: torch.Tensor, workload: str, protos=None) -> torch.Tensor:
        """Normalised look-backs xn (N, L) of one job and step -> the LM's last hidden state (N, d_llm)."""
        sh, st, mask, _ = self._prompt(workload, xn)
        return self.lm.forward_patches(self.reprogram(xn, protos), sh, st, None, mask)

    def forward(self, x: torch.Tensor, workload: str, extra: torch.Tensor | None = None, protos=None) -> torch.Tensor:
        """x (N, L) look-backs (e.g. log iteration times) of one job and step -> next value (N,). ``protos``: the
        prototypes' keys/values from :meth:`prototypes`, to share them over several calls of one training step."""
        xn, mu, sigma = self.revin.norm(x)
        h = self.hidden(xn, workload, protos)
        parts = [h] + ([extra] if extra is not None else []) + ([xn] if self.linear_skip else [])
        h = torch.cat(parts, dim=-1)
        out = self.head(h).squeeze(-1)
        return self.revin.denorm(out[:, None], mu, sigma).squeeze(-1)
