"""A tiny GPT (pre-norm transformer decoder) for the demo: small enough to train on
two CPU cores in minutes, real enough that data order shows up in its loss.

Packed batches carry ``position_ids``; attention is masked to the document so packed
documents do not see each other (block-diagonal causal mask from ``cu_seqlens``-style
boundaries, reconstructed from position ids restarting at 0).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class GPTConfig:
    vocab_size: int = 4096
    seq_len: int = 256
    d_model: int = 128
    n_layers: int = 2
    n_heads: int = 4
    dropout: float = 0.0


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.attn = nn.MultiheadAttention(cfg.d_model, cfg.n_heads, dropout=cfg.dropout, batch_first=True)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.mlp = nn.Sequential(nn.Linear(cfg.d_model, 4 * cfg.d_model), nn.GELU(), nn.Linear(4 * cfg.d_model, cfg.d_model))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.tok = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos = nn.Embedding(cfg.seq_len, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.ln = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.head.weight = self.tok.weight
        # small init: N(0, 1) embeddings tied to the output head give huge first logits
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)

    def forward(self, ids: torch.Tensor, position_ids: torch.Tensor | None = None) -> torch.Tensor:
        b, t = ids.shape
        if position_ids is None:
            position_ids = torch.arange(t).expand(b, t)
        # document id of each token: a new document starts where position ids restart
        doc = torch.cumsum((position_ids == 0).long(), dim=1)
        causal = torch.ones(t, t, dtype=torch.bool).tril()
        allowed = causal & (doc[:, :, None] == doc[:, None, :])
        mask = torch.zeros(b, t, t).masked_fill(~allowed, float("-inf"))
        mask = mask.repeat_interleave(self.cfg.n_heads, dim=0)
        x = self.tok(ids) + self.pos(position_ids.clamp(max=self.cfg.seq_len - 1))
        for blk in self.blocks:
            x = blk(x, mask)
        return self.head(self.ln(x))


def lm_loss(logits: torch.Tensor, ids: torch.Tensor, position_ids: torch.Tensor | None = None,
            ignore: torch.Tensor | None = None, reduction: str = "mean") -> torch.Tensor:
    """Next-token loss; targets that start a new document (or are padding) are ignored."""
    target = ids[:, 1:].clone()
    if position_ids is not None:
        target[position_ids[:, 1:] == 0] = -100
    if ignore is not None:
        target[ignore[:, 1:]] = -100
    return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), target.reshape(-1),
                           ignore_index=-100, reduction=reduction)
