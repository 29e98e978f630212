"""The model of SPEC §2 in plain PyTorch: the naive fp32 reference, its SDPA twin and the chunked reference.

``model_forward`` takes the weights as a flat list (``Weights.flat()``) so ``torch.compile`` sees plain
tensors. ``attn`` picks how one layer's attention is computed:
  "naive"   materialised scores, softmax, P @ V (the reference and the ``eager`` peer)
  "sdpa"    F.scaled_dot_product_attention (the ``eager_sdpa`` peer)
  "chunked" the naive math one block of queries at a time (the reference where scores do not fit)
"""
from __future__ import annotations

import contextlib
import math

import torch
import torch.nn.functional as F

from .cases import Case
from .weights import Weights

LN_EPS = 1e-5


@contextlib.contextmanager
def fp32_matmul(allow_tf32: bool = False):
    """Pin TF32 for CUDA matmuls/convolutions inside the block, restoring the previous state after."""
    old = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = allow_tf32
    torch.backends.cudnn.allow_tf32 = allow_tf32
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old


def _causal_mask(Sq: int, Sk: int, q0: int, device) -> torch.Tensor:
    """Boolean [Sq, Sk]: True where key j > query i (those scores become -inf)."""
    qi = torch.arange(q0, q0 + Sq, device=device)[:, None]
    kj = torch.arange(Sk, device=device)[None, :]
    return kj > qi


def _attention_naive(q, k, v, causal: bool, q0: int = 0):
    # q: [B, H, Sq, dh]; k, v: [B, H, S, dh]
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])  # [B, H, Sq, S]
    if causal:
        scores = scores.masked_fill(_causal_mask(q.shape[2], k.shape[2], q0, q.device), float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def _attention_chunked(q, k, v, causal: bool, block_q: int):
    """The naive math one block of ``block_q`` queries at a time, bit for bit ``_attention_naive`` on each block (the
    same products, division, mask and softmax): keys past the block's last query are left out (causal: all masked),
    the scores are scaled in place, and the mask is applied to the one block of keys that holds masked scores (the
    diagonal; every key before the block's first query is visible): no block-sized mask and no masked copy of the scores
    (case 14: 65536 queries, up to 2 GB of scores per block)."""
    S = q.shape[2]
    scale = math.sqrt(q.shape[-1])
    out = torch.empty_like(q)
    for q0 in range(0, S, block_q):
        q1 = min(S, q0 + block_q)
        kv_end = q1 if causal else S
        scores = q[:, :, q0:q1] @ k[:, :, :kv_end].transpose(-1, -2)
        scores.div_(scale)
        if causal:
            scores[..., q0:kv_end].masked_fill_(_causal_mask(q1 - q0, kv_end - q0, 0, q.device), float("-inf"))
        out[:, :, q0:q1] = torch.softmax(scores, dim=-1) @ v[:, :, :kv_end]
        del scores
    return out


def _attention(q, k, v, causal: bool, attn: str, block_q: int):
    if attn == "naive":
        return _attention_naive(q, k, v, causal)
    if attn == "sdpa":
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    if attn == "chunked":
        return _attention_chunked(q, k, v, causal, block_q)
    raise ValueError(f"unknown attention {attn!r}; valid: naive, sdpa, chunked")


def model_forward(x: torch.Tensor, flat: list[torch.Tensor], H: int, causal: bool,
                  attn: str = "naive", block_q: int = 512) -> torch.Tensor:
    """x: [B, S, D] -> y: [B, S, D]; ``flat`` = Weights.flat()."""
    B, S, D = x.shape
    dh = D // H
    L = (len(flat) - 2) // 12
    for l in range(L):
        ln1_w, ln1_b, w_qkv, b_qkv, w_o, b_o, ln2_w, ln2_b, w_1, b_1, w_2, b_2 = flat[12 * l:12 * l + 12]
        h = F.layer_norm(x, (D,), ln1_w, ln1_b, LN_EPS)
        qkv = F.linear(h, w_qkv, b_qkv)                                   # [B, S, 3D]
        q, k, v = qkv.view(B, S, 3, H, dh).permute(2, 0, 3, 1, 4)         # each [B, H, S, dh]
        a = _attention(q, k, v, causal, attn, block_q)                    # [B, H, S, dh]
        a = a.transpose(1, 2).reshape(B, S, D)
        x = x + F.linear(a, w_o, b_o)
        h = F.layer_norm(x, (D,), ln2_w, ln2_b, LN_EPS)
        x = x + F.linear(F.gelu(F.linear(h, w_1, b_1)), w_2, b_2)
    return F.layer_norm(x, (D,), flat[-2], flat[-1], LN_EPS)


def free_bytes(device: torch.device) -> int:
    """Free memory on ``device`` (CUDA: driver's free + allocator cache; CPU: MemAvailable)."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 8 << 30


def naive_fits(case: Case, device: torch.device) -> bool:
    """Do the naive model's attention temporaries (scores, mask fill, softmax: ~3 score-sized) fit?"""
    need = 3 * case.attention_score_bytes() + 16 * case.B * case.S * case.D * 4
    return need < 0.8 * free_bytes(device)


def reference_forward(case: Case, weights: Weights, x: torch.Tensor, chunked: bool | None = None,
                      block_q: int = 512) -> torch.Tensor:
    """Naive fp32 model, TF32 off; the chunked reference when the scores would not fit (or ``chunked=True``)."""
    if chunked is None:
        chunked = not naive_fits(case, x.device)
    with fp32_matmul(False), torch.no_grad():
        return model_forward(x, weights.flat(), case.H, case.causal,
                             attn="chunked" if chunked else "naive", block_q=block_q)


def nn_encoder(case: Case, weights: Weights) -> torch.nn.TransformerEncoder:
    """``torch.nn.TransformerEncoder`` of SPEC §2 with ``weights`` loaded, eval mode, on the weights' device."""
    D = case.D
    layer = torch.nn.TransformerEncoderLayer(
        d_model=D, nhead=case.H, dim_feedforward=4 * D, dropout=0.0, activation="gelu",
        layer_norm_eps=LN_EPS, batch_first=True, norm_first=True, bias=True)
    enc = torch.nn.TransformerEncoder(layer, case.L, norm=torch.nn.LayerNorm(D, eps=LN_EPS),
                                      enable_nested_tensor=False)
    with torch.no_grad():
        for mod, lw in zip(enc.layers, weights.layers):
            mod.self_attn.in_proj_weight.copy_(lw.w_qkv); mod.self_attn.in_proj_bias.copy_(lw.b_qkv)
            mod.self_attn.out_proj.weight.copy_(lw.w_o); mod.self_attn.out_proj.bias.copy_(lw.b_o)
            mod.linear1.weight.copy_(lw.w_1); mod.linear1.bias.copy_(lw.b_1)
            mod.linear2.weight.copy_(lw.w_2); mod.linear2.bias.copy_(lw.b_2)
            mod.norm1.weight.copy_(lw.ln1_w); mod.norm1.bias.copy_(lw.ln1_b)
            mod.norm2.weight.copy_(lw.ln2_w); mod.norm2.bias.copy_(lw.ln2_b)
        enc.norm.weight.copy_(weights.lnf_w); enc.norm.bias.copy_(weights.lnf_b)
    return enc.to(weights.device).eval()


def nn_forward(enc: torch.nn.TransformerEncoder, x: torch.Tensor, causal: bool) -> torch.Tensor:
    S = x.shape[1]
    mask = torch.nn.Transformer.generate_square_subsequent_mask(S, device=x.device) if causal else None
    return enc(x, mask=mask, is_causal=causal)
