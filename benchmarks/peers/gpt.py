"""The PyTorch twin of gdist's GPT (models/gpt.go): the same modules in the
same order, so a gdist checkpoint loads with load_state_dict(strict=True)
and the same weights give the same loss and gradients.

    import gpt; m = gpt.GPT(layers, dim, heads, context)
    logits = m(x)  # x: (N, context) byte values (long), logits (N, context, 256)
"""
import json
import struct

import torch
import torch.nn as nn

VOCAB = 256


class PositionEmbedding(nn.Module):
    """x + weight[:T], weight (T, dim) (gdist nn.PositionEmbedding)."""

    def __init__(self, t, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(t, dim))

    def forward(self, x):
        return x + self.weight[: x.shape[1]]


class Residual(nn.Module):
    """x + fn(x) (gdist nn.Residual)."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return x + self.fn(x)


class CausalSelfAttention(nn.MultiheadAttention):
    """nn.MultiheadAttention over (N, T, dim) with a causal mask."""

    def __init__(self, dim, heads):
        super().__init__(dim, heads, batch_first=True)

    def forward(self, x):
        t = x.shape[1]
        mask = torch.triu(torch.ones(t, t, dtype=torch.bool, device=x.device), 1)
        return super().forward(x, x, x, attn_mask=mask, need_weights=False)[0]


class Tokens(nn.Embedding):
    """Byte ids arrive as floats from gdist's loaders; take them as ids."""

    def forward(self, x):
        return super().forward(x.long())


def GPT(layers, dim, heads, context):
    mods = [Tokens(VOCAB, dim), PositionEmbedding(context, dim)]
    for _ in range(layers):
        mods.append(Residual(nn.Sequential(nn.LayerNorm(dim), CausalSelfAttention(dim, heads))))
        mods.append(Residual(nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))))
    mods += [nn.LayerNorm(dim), nn.Linear(dim, VOCAB)]
    return nn.Sequential(*mods)


def load_safetensors(path):
    """The F32 tensors of a safetensors file (gdist's checkpoint format) by
    name, read with the standard library (no safetensors package)."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    body = memoryview(raw)[8 + n :]
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        if t["dtype"] != "F32":
            raise ValueError(f"{path}: tensor {name} is {t['dtype']}, want F32")
        a, b = t["data_offsets"]
        out[name] = torch.frombuffer(bytearray(body[a:b]), dtype=torch.float32).reshape(t["shape"])
    return out
