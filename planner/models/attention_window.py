"""Which layers attend to a bounded window of past tokens, and how many: what a serving KV cache keeps for them.

A layer with sliding-window attention (Mistral-7B, Phi-3, Gemma 2 and 3, gpt-oss) or chunked attention (Llama 4)
never looks further back than its window, so a serving engine keeps at most that many tokens of its keys and values
(vLLM frees the blocks a window has left). The rules are transformers' own, read in its configuration classes
(transformers 5.24, as installed here; docs/inference.md, "Memory"):

- `layer_types` in the config names each layer: "sliding_attention" and "chunked_attention" are windowed.
- Without it, the class's default (and its default window where the key is left out): Gemma 2 alternates from a sliding first layer (configuration_gemma2.py); Gemma 3
  makes every `sliding_window_pattern`-th layer full, 6 by default (configuration_gemma3.py); gpt-oss alternates
  (configuration_gpt_oss.py); Llama 4 chunks every layer but each `no_rope_layer_interval`-th, 4 by default, at
  `attention_chunk_size` (configuration_llama4.py), a token attending to its own chunk alone; Mistral, Mixtral and
  Phi-3 window every layer when `sliding_window` is set (their attention passes it to every layer,
  modeling_mistral.py, modeling_mixtral.py and modeling_phi3.py), whatever layer_types a Mistral config carries.
- Qwen2's `sliding_window` is used only with `use_sliding_window`, false in every Qwen config the catalog holds:
  no window is read for it, nor for any other model type (an over-count of the cache, the safe side).
"""

from __future__ import annotations

WINDOWED = ("sliding_attention", "chunked_attention")
_ALTERNATING = ("gemma2", "gpt_oss")  # layers 0, 2, 4...: (i + 1) % 2 is true
_EVERY_LAYER = ("mistral", "mixtral", "phi3")
# The class's default window where a config leaves the key out (configuration_<type>.py).
_DEFAULT_WINDOW = {"gemma2": 4096, "gemma3": 4096, "gemma3_text": 4096, "gpt_oss": 128}
_LLAMA4_DEFAULT_CHUNK = 8192


def attention_window(config: dict, num_layers: int) -> tuple[int, int, bool]:
    """(window tokens, windowed layers, chunked) of a config.json's text model; (0, 0, False) where every layer
    attends to all. Chunked (Llama 4): a token attends to its own chunk alone, on average half of it."""
    config = config.get("text_config") or config
    model_type = config.get("model_type", "")
    if model_type.startswith("llama4"):
        chunk = config.get("attention_chunk_size", _LLAMA4_DEFAULT_CHUNK)
        if not chunk:
            return 0, 0, False
        no_rope = config.get("no_rope_layers")
        if isinstance(no_rope, list) and no_rope:
            return int(chunk), sum(1 for value in no_rope if value), True
        interval = int(config.get("no_rope_layer_interval") or 4)
        return int(chunk), num_layers - num_layers // interval, True
    window = config.get("sliding_window", _DEFAULT_WINDOW.get(model_type))
    if not window:
        return 0, 0, False
    layer_types = config.get("layer_types")
    if isinstance(layer_types, list) and layer_types and model_type not in _EVERY_LAYER:
        return int(window), sum(kind in WINDOWED for kind in layer_types), False
    if model_type in _ALTERNATING:
        return int(window), (num_layers + 1) // 2, False
    if model_type.startswith("gemma3"):
        pattern = int(config.get("sliding_window_pattern") or 6)
        return int(window), num_layers - num_layers // pattern, False  # every pattern-th layer is full
    if model_type in _EVERY_LAYER:  # transformers windows every layer (a Mistral config's layer_types ignored)
        return int(window), num_layers, False
    return 0, 0, False


def attended_tokens(spec, length: float) -> float:
    """Tokens a token attends to over every layer, where a full-attention layer gives it `length`: a sliding window
    caps the span at the window, a chunk at half of it (a token attends to the part of its chunk before it)."""
    windowed = spec.windowed_layers
    if not windowed:
        return spec.num_layers * length
    cap = spec.attention_window / 2 if spec.chunked_attention else spec.attention_window
    return (spec.num_layers - windowed) * length + windowed * min(length, cap)
