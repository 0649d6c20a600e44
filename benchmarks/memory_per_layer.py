"""Per-layer activation bytes of HF model families: traced, against the estimator.

    python benchmarks/memory_per_layer.py [--only LABEL ...] [--compare] [--markdown]

Each entry traces one training step (benchmarks/memory_trace.py) of a tiny model
(hidden 256, 4 heads, batch 2 x 256 tokens) with 2 and with 3 layers; the
difference of the traced activations is what one block keeps (plus, under
autocast, its weight copies). The estimator's figure is the same difference of
its activations and buffers under `Runtime.CPU_TRACE`. This is how the traits
in planner/memory/arch_traits.py were found and are kept honest, for families
beyond the full-size configurations of trace_configs.py. Results are merged
into benchmarks/results/memory_per_layer.json by label, atomically.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from planner.files import write_json_atomic  # noqa: E402
from planner.memory.activations import activation_widths, estimate_activations  # noqa: E402
from planner.memory.buffers import estimate_buffers  # noqa: E402
from planner.memory.rank_params import rank_params  # noqa: E402
from planner.memory.runtime import Runtime  # noqa: E402
from planner.models.hf_config import spec_from_hf_config  # noqa: E402
from planner.training_config import TrainingConfig  # noqa: E402

RESULTS = REPO_ROOT / "benchmarks" / "results" / "memory_per_layer.json"
CATALOG = REPO_ROOT / "planner" / "catalog" / "models"
H, HEADS, FFN, VOCAB, BATCH, SEQ = 256, 4, 1024, 512, 2, 256
VIT_TOKENS = (64 // 4) ** 2 + 1


LLAVA_IMAGE_TOKENS = (64 // 4) ** 2


def seq_for(family: str) -> int:
    """Tokens per sequence: SEQ for text, the patches and CLS token for ViT (fixed by its image), and for
    LLaVA the image's tokens followed by 64 of text."""
    return VIT_TOKENS if family == "vit" else LLAVA_IMAGE_TOKENS + 64 if family == "llava" else SEQ


PRECISIONS = ("fp32", "bf16-mixed", "bf16")

# Families built from their published HF configs with tiny dimensions.
INLINE = {
    "gpt2": lambda n: {
        "model_type": "gpt2",
        "n_layer": n,
        "n_embd": H,
        "n_head": HEADS,
        "vocab_size": VOCAB,
        "n_positions": 1024,
    },
    "opt": lambda n: {
        "model_type": "opt",
        "hidden_size": H,
        "ffn_dim": FFN,
        "num_hidden_layers": n,
        "num_attention_heads": HEADS,
        "vocab_size": VOCAB,
        "max_position_embeddings": 1024,
        "word_embed_proj_dim": H,
        "do_layer_norm_before": True,
        "dropout": 0.1,
        "attention_dropout": 0.0,
        "activation_function": "relu",
    },
    "llama": lambda n: {
        "model_type": "llama",
        "hidden_size": H,
        "intermediate_size": FFN,
        "num_hidden_layers": n,
        "num_attention_heads": HEADS,
        "num_key_value_heads": 2,
        "vocab_size": VOCAB,
        "max_position_embeddings": 1024,
    },
    "mixtral": lambda n: {
        "model_type": "mixtral",
        "hidden_size": H,
        "intermediate_size": FFN // 2,
        "num_hidden_layers": n,
        "num_attention_heads": HEADS,
        "num_key_value_heads": 2,
        "num_local_experts": 4,
        "num_experts_per_tok": 2,
        "vocab_size": VOCAB,
    },
    "bert": lambda n: {
        "model_type": "bert",
        "hidden_size": H,
        "num_hidden_layers": n,
        "num_attention_heads": HEADS,
        "intermediate_size": FFN,
        "vocab_size": VOCAB,
    },
    # 64-pixel images in 4-pixel patches: 256 patches and the CLS token (VIT_TOKENS).
    "vit": lambda n: {
        "model_type": "vit",
        "hidden_size": H,
        "num_hidden_layers": n,
        "num_attention_heads": HEADS,
        "intermediate_size": FFN,
        "image_size": 64,
        "patch_size": 4,
        "num_labels": 10,
    },
    "t5": lambda n: {
        "model_type": "t5",
        "d_model": H,
        "d_kv": H // HEADS,
        "d_ff": FFN,
        "num_layers": n,
        "num_heads": HEADS,
        "vocab_size": VOCAB,
    },
    # A short audio window (128 positions from 256 mel frames) keeps the trace small; n layers in each stack.
    "whisper": lambda n: {
        "model_type": "whisper",
        "d_model": H,
        "encoder_layers": n,
        "decoder_layers": n,
        "encoder_attention_heads": HEADS,
        "decoder_attention_heads": HEADS,
        "encoder_ffn_dim": FFN,
        "decoder_ffn_dim": FFN,
        "max_source_positions": 128,
        "vocab_size": VOCAB,
        **{key: 1 for key in ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id")},
    },
    # LLaVA: n CLIP layers in the tower (64-pixel images in 4-pixel patches) before a 2-layer Llama, so the
    # difference is one tower block over its 257 positions.
    "llava": lambda n: {
        "model_type": "llava",
        "image_token_index": VOCAB - 1,
        "pad_token_id": VOCAB - 2,
        "vision_feature_layer": -1,  # every tower block feeds the LLM, so each added one is trained
        "vision_config": {
            "model_type": "clip_vision_model",
            "hidden_size": H,
            "intermediate_size": FFN,
            "num_hidden_layers": n,
            "num_attention_heads": HEADS,
            "image_size": 64,
            "patch_size": 4,
        },
        "text_config": {
            "model_type": "llama",
            "hidden_size": H,
            "intermediate_size": FFN,
            "num_hidden_layers": 2,
            "num_attention_heads": HEADS,
            "vocab_size": VOCAB,
            "max_position_embeddings": 1024,
        },
    },
}
# Catalog families: the catalog config with these dimensions overridden (and its layer key).
TOKENS = {"bos_token_id": 1, "eos_token_id": 2}
CATALOG_OVERRIDES: dict[str, tuple[str, dict[str, Any]]] = {
    "phi-3-mini": (
        "num_hidden_layers",
        dict(
            hidden_size=H,
            intermediate_size=FFN,
            num_attention_heads=HEADS,
            num_key_value_heads=HEADS,
            vocab_size=VOCAB,
            pad_token_id=0,
            **TOKENS,
        ),
    ),
    "gemma-2-2b": (
        "num_hidden_layers",
        dict(
            hidden_size=H,
            intermediate_size=FFN,
            num_attention_heads=HEADS,
            num_key_value_heads=2,
            head_dim=64,
            query_pre_attn_scalar=64,
            vocab_size=VOCAB,
        ),
    ),
    "gemma-3-1b": (
        "num_hidden_layers",
        dict(
            hidden_size=H,
            intermediate_size=FFN,
            num_attention_heads=HEADS,
            num_key_value_heads=1,
            head_dim=64,
            query_pre_attn_scalar=64,
            vocab_size=VOCAB,
        ),
    ),
    "falcon-7b": ("num_hidden_layers", dict(hidden_size=H, num_attention_heads=HEADS, vocab_size=VOCAB, **TOKENS)),
    "pythia-160m": (
        "num_hidden_layers",
        dict(hidden_size=H, intermediate_size=FFN, num_attention_heads=HEADS, vocab_size=VOCAB),
    ),
    "bloom-560m": ("n_layer", dict(n_embed=H, num_attention_heads=HEADS, vocab_size=VOCAB)),
    "qwen2.5-0.5b": (
        "num_hidden_layers",
        dict(
            hidden_size=H,
            intermediate_size=FFN,
            num_attention_heads=HEADS,
            num_key_value_heads=2,
            vocab_size=VOCAB,
            **TOKENS,
        ),
    ),
    "qwen3-8b": (
        "num_hidden_layers",
        dict(
            hidden_size=H,
            intermediate_size=FFN,
            num_attention_heads=HEADS,
            num_key_value_heads=2,
            head_dim=64,
            vocab_size=VOCAB,
            **TOKENS,
        ),
    ),
    "gpt-j-6b": ("n_layer", dict(n_embd=H, n_head=HEADS, rotary_dim=16, vocab_size=VOCAB, **TOKENS)),
    "mistral-7b": (
        "num_hidden_layers",
        dict(
            hidden_size=H,
            intermediate_size=FFN,
            num_attention_heads=HEADS,
            num_key_value_heads=2,
            vocab_size=VOCAB,
            **TOKENS,
        ),
    ),
    "gemma-7b": (
        "num_hidden_layers",
        dict(
            hidden_size=H,
            intermediate_size=FFN,
            num_attention_heads=HEADS,
            num_key_value_heads=HEADS,
            head_dim=64,
            vocab_size=VOCAB,
            **TOKENS,
        ),
    ),
    "roberta-base": (
        "num_hidden_layers",
        dict(hidden_size=H, intermediate_size=FFN, num_attention_heads=HEADS, vocab_size=VOCAB),
    ),
    "qwen1.5-moe-a2.7b": (
        "num_hidden_layers",
        dict(
            hidden_size=H,
            intermediate_size=FFN,
            moe_intermediate_size=128,
            shared_expert_intermediate_size=FFN,
            num_experts=4,
            num_experts_per_tok=2,
            num_attention_heads=HEADS,
            num_key_value_heads=HEADS,
            vocab_size=VOCAB,
            **TOKENS,
        ),
    ),
}
_DROPPED_KEYS = (
    "quantization_config",
    "torch_dtype",
    "dtype",
    "_name_or_path",
    "transformers_version",
    "rope_scaling",
    "layer_types",
    "sliding_window",
    "use_sliding_window",
)
# (family, attentions, checkpointing modes); T5's attention is inline (no selective), a Whisper "layer" is one
# encoder and one decoder block, and
# BLOOM, GPT-J and Gemma-2 have no SDPA path in transformers.
FAMILIES = [
    *[(name, ("sdpa", "eager"), ("none", "selective")) for name in ("gpt2", "opt", "llama", "mixtral", "bert")],
    ("t5", ("eager",), ("none",)),
    ("vit", ("sdpa", "eager"), ("none",)),
    ("whisper", ("sdpa", "eager"), ("none",)),
    ("llava", ("sdpa", "eager"), ("none",)),
    *[
        (name, ("sdpa",), ("none",))
        for name in ("phi-3-mini", "gemma-3-1b", "falcon-7b", "pythia-160m", "qwen2.5-0.5b", "qwen3-8b")
    ],
    *[(name, ("eager",), ("none",)) for name in ("gemma-2-2b", "bloom-560m", "gpt-j-6b")],
    *[(name, ("sdpa",), ("none",)) for name in ("mistral-7b", "gemma-7b", "roberta-base", "qwen1.5-moe-a2.7b")],
]


def model_config(family: str, layers: int) -> dict[str, Any]:
    if family in INLINE:
        return INLINE[family](layers)
    layer_key, overrides = CATALOG_OVERRIDES[family]
    config = json.loads((CATALOG / f"{family}.json").read_text(encoding="utf-8"))["config"]
    config = {key: value for key, value in config.items() if key not in _DROPPED_KEYS}
    return {**config, **overrides, layer_key: layers}


def entries() -> dict[str, tuple[str, str, str, str]]:
    """label -> (family, precision, attention, checkpointing)."""
    table = {}
    for family, attentions, modes in FAMILIES:
        for precision, attention, mode in itertools.product(PRECISIONS, attentions, modes):
            table[f"{family}/{precision}/{attention}/{mode}"] = (family, precision, attention, mode)
    return table


def trace_per_layer(label: str) -> dict[str, Any]:
    from benchmarks.memory_trace import TraceConfig, run_trace

    family, precision, attention, mode = entries()[label]
    traced = [
        run_trace(
            TraceConfig(
                label=label,
                model=model_config(family, layers),
                micro_batch=BATCH,
                seq_len=seq_for(family),
                precision=precision,
                attention=attention,
                activation_checkpointing=mode,
            )
        )
        for layers in (2, 3)
    ]
    per_layer = traced[1].normalized_at_peak["Activation"] - traced[0].normalized_at_peak["Activation"]
    return {
        "label": label,
        "per_layer_bytes": per_layer,
        "kernel": traced[0].attention_kernel,
        "peak_phase": traced[0].peak_phase,
        "torch_version": traced[0].torch_version,
        "transformers_version": traced[0].transformers_version,
    }


def estimated_per_layer(label: str) -> float:
    family, precision, attention, mode = entries()[label]
    config = TrainingConfig(
        precision=precision,
        attention=attention,
        activation_checkpointing=mode,
        micro_batch=BATCH,
        seq_len=seq_for(family),
    )

    def kept(layers: int) -> float:
        """Activations and autocast's weight copies at backward start, on one rank (DDP)."""
        spec = spec_from_hf_config(model_config(family, layers), name=family)
        widths = activation_widths(config, True, Runtime.CPU_TRACE)
        activations = estimate_activations(spec, config, widths).activations
        buffers = estimate_buffers(spec, config, rank_params(spec, config), 1, Runtime.CPU_TRACE)
        return activations + buffers.during_backward

    return kept(3) - kept(2)


def compare(recorded: list[dict]) -> list[tuple[str, float, float, float]]:
    rows = []
    for entry in recorded:
        ours = estimated_per_layer(entry["label"])
        rows.append((entry["label"], entry["per_layer_bytes"], ours, ours / entry["per_layer_bytes"] - 1))
    return rows


def load() -> list[dict]:
    return json.loads(RESULTS.read_text(encoding="utf-8"))["results"] if RESULTS.is_file() else []


def _write(results: list[dict]) -> None:
    document = {"description": __doc__.strip().splitlines()[0], "results": results}
    write_json_atomic(RESULTS, document, indent=1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="+", metavar="LABEL", help="trace only these labels")
    parser.add_argument("--compare", action="store_true", help="compare the recorded results, trace nothing")
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args(argv)
    known = entries()
    if not args.compare:
        labels = args.only or list(known)
        unknown = [label for label in labels if label not in known]
        if unknown:
            parser.error(f"unknown labels: {unknown}")
        merged = {entry["label"]: entry for entry in load()}
        for label in labels:
            merged[label] = trace_per_layer(label)
            print(f"traced {label}", flush=True)
        _write([merged[label] for label in known if label in merged])
    rows = compare(load())
    if args.markdown:
        print("| family / precision / attention / checkpointing | traced KiB per layer | estimate KiB | error |")
        print("|---|---:|---:|---:|")
    for label, traced, ours, error in rows:
        if args.markdown:
            print(f"| {label} | {traced / 1024:.0f} | {ours / 1024:.0f} | {error:+.1%} |")
        else:
            print(f"{label:40s} traced {traced / 1024:8.0f} KiB  estimate {ours / 1024:8.0f} KiB  {error:+6.1%}")
    worst = max(rows, key=lambda row: abs(row[3]))
    print(f"{len(rows)} entries; largest error {worst[3]:+.1%} ({worst[0]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
