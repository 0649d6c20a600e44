"""Which layers attend to a bounded window of past tokens, and how many: what a serving KV cache keeps for them.

A layer with sliding-window attention (Mistral-7B, Phi-3, Gemma 2 and 3, gpt-oss) or chunked attention (Llama 4)
never looks further back than its window, so a serving engine keeps at most that many tokens of its keys and values
(vLLM frees the blocks a window has left). The rules are transformers' own, read in its configuration classes
(transformers 5.24, as installed here; docs/inference.md, "Memory"):

- `layer_types` in the config names each layer: "sliding_attention" and "chunked_attention" are windowed.
- Without it, the class's default: Gemma 2 alternates from a sliding first layer (configuration_gemma2.py); Gemma 3
  makes every `sliding_window_pattern`-th layer full, 6 by default (configuration_gemma3.py); gpt-oss alternates
  (configuration_gpt_oss.py); Llama 4 chunks every layer but each `no_rope_layer_interval`-th, 4 by default, at
  `attention_chunk_size` (configuration_llama4.py); Mistral and Phi-3 window every layer when `sliding_window` is set
  (their attention passes it to every layer, modeling_mistral.py and modeling_phi3.py).
- Qwen2's `sliding_window` is used only with `use_sliding_window`, false in every Qwen config the catalog holds:
  no window is read for it, nor for any other model type.
"""

from __future__ import annotations

WINDOWED = ("sliding_attention", "chunked_attention")
# model_type -> which layers are windowed when the config has no layer_types (index -> windowed?).
_ALTERNATING = ("gemma2", "gpt_oss")
_EVERY_LAYER = ("mistral", "phi3")


def attention_window(config: dict, num_layers: int) -> tuple[int, int]:
    """(window tokens, windowed layers) of a config.json's text model; (0, 0) where every layer attends to all."""
    config = config.get("text_config") or config
    model_type = config.get("model_type", "")
    if model_type.startswith("llama4"):
        window = config.get("attention_chunk_size")
    else:
        window = config.get("sliding_window")
    if not window:
        return 0, 0
    layer_types = config.get("layer_types")
    if isinstance(layer_types, list) and layer_types:
        return int(window), sum(kind in WINDOWED for kind in layer_types)
    if model_type in _ALTERNATING:
        return int(window), (num_layers + 1) // 2  # layers 0, 2, 4...: (i + 1) % 2 is true
    if model_type.startswith("gemma3"):
        pattern = int(config.get("sliding_window_pattern", 6))
        return int(window), num_layers - num_layers // pattern  # every pattern-th layer is full
    if model_type.startswith("llama4"):
        no_rope = config.get("no_rope_layers")
        if isinstance(no_rope, list) and no_rope:
            return int(window), sum(1 for value in no_rope if value)
        interval = int(config.get("no_rope_layer_interval", 4))
        return int(window), num_layers - num_layers // interval
    if model_type in _EVERY_LAYER:
        return int(window), num_layers
    return 0, 0
