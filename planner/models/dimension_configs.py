"""The config.json a model typed as raw dimensions stands for (--hidden --layers ... --mlp --positions).

Each combination of MLP and positions is the published architecture that has it, so the dimensions are read
(and counted) by that family's own reader:

    --mlp gated                      Llama (Mixtral with --experts): rotary positions, untied embeddings
    --mlp standard --positions learned  GPT-2: a learned table of --max-positions rows, biases, tied embeddings
    --mlp standard --positions rope     GPT-NeoX, sequential residual and full-width rotary, tied embeddings
    --mlp standard --positions alibi    MPT: ALiBi, no biases, tied embeddings (MPT-7B's shape)
    --mlp standard --positions none     MPT with neither ALiBi nor a table (NoPE)

--max-positions is the learned table's size, or the context a rotary model states; ALiBi and no positions have
neither, so it is refused there and the spec carries the nominal DEFAULT_MAX_POSITIONS (used for defaults only:
training is never refused for going past it).
"""

from __future__ import annotations

from typing import Any

from planner.errors import UserInputError
from planner.limits import MAX_SEQ_LEN, check_count

POSITIONS = ("learned", "rope", "alibi", "none")
DEFAULT_MAX_POSITIONS = 8192
DEFAULT_POSITIONS = {"gated": "rope", "standard": "learned"}
# A spec's position_embedding, as --positions names it (the way back, for run folders).
POSITIONS_OF_SPEC = {"learned": "learned", "rotary": "rope", "alibi": "alibi", "none": "none"}


def check_positions(mlp: str, positions: str | None, max_positions: int | None) -> tuple[str, int]:
    """The positions and position limit a dimension-flag model gets, or a one-line error."""
    if mlp not in DEFAULT_POSITIONS:
        raise UserInputError(f"--mlp must be 'gated' or 'standard', not '{mlp}'")
    chosen = positions or DEFAULT_POSITIONS[mlp]
    if chosen not in POSITIONS:
        raise UserInputError(f"--positions must be learned, rope, alibi or none, not '{positions}'")
    if mlp == "gated" and chosen != "rope":
        raise UserInputError(
            f"--positions {chosen}: --mlp gated builds a Llama-shaped model, whose positions are rotary; use "
            "--mlp standard for learned, alibi or none"
        )
    if max_positions is None:
        return chosen, DEFAULT_MAX_POSITIONS
    if chosen in ("alibi", "none"):
        raise UserInputError(
            f"--max-positions sizes a learned position table or a rotary model's context; --positions {chosen} "
            "has neither: drop it"
        )
    return chosen, check_count("--max-positions", max_positions, high=MAX_SEQ_LEN)


def dimension_config(
    *,
    hidden: int,
    layers: int,
    heads: int,
    kv_heads: int,
    ffn: int,
    vocab: int,
    experts: int = 0,
    top_k: int | None = None,
    mlp: str = "gated",
    positions: str = "rope",
    max_positions: int = DEFAULT_MAX_POSITIONS,
) -> dict[str, Any]:
    """The config.json dict of that published architecture (arguments already checked)."""
    if mlp == "gated":
        config: dict[str, Any] = {
            "model_type": "mixtral" if experts else "llama",
            "hidden_size": hidden,
            "num_hidden_layers": layers,
            "num_attention_heads": heads,
            "num_key_value_heads": kv_heads,
            "intermediate_size": ffn,
            "vocab_size": vocab,
            "max_position_embeddings": max_positions,
            "hidden_act": "silu",
            "tie_word_embeddings": False,
        }
        if experts:
            config.update(num_local_experts=experts, num_experts_per_tok=top_k)
        return config
    if positions == "learned":
        # GPT-2's class defaults its begin/end-of-text ids to 50256, the last of ITS vocabulary; with another
        # --vocab they would point past the embedding table (a final/config.json whose generate() fails). GPT-2's
        # own convention, the last id, holds for any vocabulary.
        return {"model_type": "gpt2", "n_embd": hidden, "n_layer": layers, "n_head": heads, "n_inner": ffn,
                "vocab_size": vocab, "n_positions": max_positions, "activation_function": "gelu_new",
                "bos_token_id": vocab - 1, "eos_token_id": vocab - 1}  # fmt: skip
    if positions == "rope":
        return {"model_type": "gpt_neox", "hidden_size": hidden, "num_hidden_layers": layers,
                "num_attention_heads": heads, "intermediate_size": ffn, "vocab_size": vocab,
                "max_position_embeddings": max_positions, "rotary_pct": 1.0, "use_parallel_residual": False,
                "tie_word_embeddings": True, "hidden_act": "gelu"}  # fmt: skip
    return {
        "model_type": "mpt",
        "d_model": hidden,
        "n_layers": layers,
        "n_heads": heads,
        "ffn_config": {"ffn_type": "mptmlp", "ffn_hidden_size": ffn},
        "vocab_size": vocab,
        "max_seq_len": max_positions,
        "no_bias": True,
        "attn_config": {"alibi": positions == "alibi"},
        "learned_pos_emb": False,
    }
