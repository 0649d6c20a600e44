"""MoE checkpoints store one matrix per expert; transformers 5's modules hold them fused.

Each MoE layer of transformers 5 (Mixtral, Qwen2-MoE) keeps its experts as two 3-D parameters:
`experts.gate_up_proj` (experts, 2 x ffn, hidden; the gate rows first, then the up rows, as the forward
chunks them) and `experts.down_proj` (experts, hidden, ffn). Checkpoints, the hub's and the ones
save_pretrained writes (it converts back), keep the original per-expert layout:

- Mixtral: `block_sparse_moe.experts.E.w1` (gate), `.w3` (up), `.w2` (down), and the router at
  `block_sparse_moe.gate`;
- Qwen2-MoE: `mlp.experts.E.gate_proj`, `.up_proj`, `.down_proj` (its router and shared expert keep
  their module names).

These helpers name the checkpoint keys that make up one module tensor, so the runner's WeightSource
(backends/weights/source.py) reads MoE checkpoints for every strategy.
"""

from __future__ import annotations

import re
from collections.abc import Container

_FUSED = re.compile(r"^(?P<layer>.*)\.mlp\.experts\.(?P<which>gate_up_proj|down_proj)$")
_ROUTER = re.compile(r"^(?P<layer>.*)\.mlp\.gate\.weight$")
# Per checkpoint layout: the experts' key prefix and the matrices of each fused tensor, in order.
_LAYOUTS = (
    ("block_sparse_moe.experts", {"gate_up_proj": ("w1", "w3"), "down_proj": ("w2",)}),
    ("mlp.experts", {"gate_up_proj": ("gate_proj", "up_proj"), "down_proj": ("down_proj",)}),
)


def renamed_key(name: str, keys: Container[str]) -> str | None:
    """The checkpoint key of a module tensor stored under another name (Mixtral's router), or None."""
    match = _ROUTER.match(name)
    if match:
        key = f"{match['layer']}.block_sparse_moe.gate.weight"
        if key in keys:
            return key
    return None


def fused_expert_keys(name: str, keys: Container[str]) -> list[tuple[str, ...]] | None:
    """For a fused experts tensor: per expert, the checkpoint keys to concatenate (rows); None otherwise."""
    match = _FUSED.match(name)
    if not match:
        return None
    for experts, matrices in _LAYOUTS:
        parts = matrices[match["which"]]
        found: list[tuple[str, ...]] = []
        while all(f"{match['layer']}.{experts}.{len(found)}.{part}.weight" in keys for part in parts):
            found.append(tuple(f"{match['layer']}.{experts}.{len(found)}.{part}.weight" for part in parts))
        if found:
            return found
    return None
