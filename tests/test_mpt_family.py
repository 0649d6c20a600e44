"""MPT (model_type "mpt"): its config.json reader, and raw dimensions with --positions / --max-positions.

References:
- mosaicml/mpt-7b's config.json (https://huggingface.co/mosaicml/mpt-7b/blob/main/config.json), stored in
  tests/data/configs/mpt-7b.json as read from copies of it (OpenVINO/mpt-7b-int8-ov and ybelkada/mpt-7b-bf16-sharded,
  converted from mosaicml/mpt-7b at revision 72e5f594ce36f9cabfa2a9fd8f58b491eb467ee7; mosaicml/mpt-7b-chat's own
  file for the attn_config block): d_model 4096, 32 heads, 32 layers, expansion_ratio 4, vocab 50432, no_bias,
  ALiBi, max_seq_len 2048;
- its model card's hyperparameter table (https://huggingface.co/mosaicml/mpt-7b): n_parameters 6.7B;
- mosaicml/mpt-30b's weight index (https://huggingface.co/mosaicml/mpt-30b/blob/main/pytorch_model.bin.index.json):
  total_size 59,914,401,792 bytes of bf16 weights, with no position table though its config says learned_pos_emb
  (ALiBi takes its place), dimensions from mosaicml/mpt-30b-chat's config.json (revision 437d912);
- transformers' MptForCausalLM built on the meta device (for MPT-7B the same model as MosaicML's own code).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hardware_selector import main
from planner.errors import UserInputError
from planner.models.hf_config import spec_from_hf_config
from planner.models.resolve import resolve_model, spec_from_dimensions

CONFIG = Path(__file__).parent / "data" / "configs" / "mpt-7b.json"
MPT_7B_DIMENSIONS = ["--hidden", "4096", "--layers", "32", "--heads", "32", "--ffn", "16384", "--vocab", "50432",
                     "--mlp", "standard"]  # fmt: skip
CLUSTER = ["--gpu", "H100-80GB", "--gpus-per-node", "8", "--global-batch", "64"]


def _config() -> dict:
    return json.loads(CONFIG.read_text(encoding="utf-8"))


def _by_hand(hidden: int, layers: int, ffn: int, vocab: int) -> int:
    """MPT-7B's layout: tied vocab x d_model table, no position table (ALiBi), per block a fused Wqkv (3 h^2),
    out_proj (h^2), up and down (2 h ffn) and two bias-free LayerNorms (2 h), a final LayerNorm (h)."""
    return vocab * hidden + layers * (4 * hidden * hidden + 2 * hidden * ffn + 2 * hidden) + hidden


def test_reader_takes_the_dimensions_mpt_names():
    spec = spec_from_hf_config(_config(), name="mpt-7b")
    assert (spec.hidden_size, spec.num_layers, spec.num_heads, spec.num_kv_heads) == (4096, 32, 32, 32)
    assert (spec.ffn_size, spec.vocab_size, spec.max_position_embeddings) == (16384, 50432, 2048)
    assert spec.position_embedding == "alibi" and spec.tied_embeddings
    assert not spec.attention_bias and not spec.mlp_bias
    assert spec.transformers_class == "MptForCausalLM"


def test_count_equals_the_configs_own_dimensions_and_the_model_card():
    total = spec_from_hf_config(_config(), name="mpt-7b").params.total
    assert total == _by_hand(4096, 32, 4 * 4096, 50432) == 6_649_286_656
    assert total == pytest.approx(6.7e9, rel=0.01)  # the card's n_parameters, 6.649B rounded up


def test_mpt_30b_count_equals_its_published_weights():
    config = {**_config(), "d_model": 7168, "n_heads": 64, "n_layers": 48}
    total = spec_from_hf_config(config, name="mpt-30b").params.total
    assert total == _by_hand(7168, 48, 4 * 7168, 50432)
    assert 2 * total == 59_914_401_792  # bf16 bytes in the weight index


def test_count_equals_transformers_class_on_meta_device():
    pytest.importorskip("transformers")
    spec = resolve_model(str(CONFIG))  # a config path is counted on the meta device
    assert spec.params.source == "meta-device"
    assert spec.params.total == 6_649_286_656


def test_raw_dimensions_with_alibi_are_mpt_7b():
    from_flags = spec_from_dimensions(hidden=4096, layers=32, heads=32, ffn=16384, vocab=50432, mlp="standard",
                                      positions="alibi")  # fmt: skip
    from_config = spec_from_hf_config(_config(), name="mpt-7b")
    assert from_flags.model_type == "mpt" and from_flags.position_embedding == "alibi"
    assert from_flags.params.total == from_config.params.total


@pytest.mark.parametrize("model", [["--model", str(CONFIG)], [*MPT_7B_DIMENSIONS, "--positions", "alibi"]])
def test_plans_at_65k_tokens(model, capsys):
    assert main(["plan", *model, *CLUSTER, "--seq-len", "65536", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["best"]["throughput"]["tokens_per_s"] > 0


def test_learned_positions_are_still_capped(capsys):
    """The default for --mlp standard stays GPT-2's learned table (8192 rows unless --max-positions says)."""
    assert main(["plan", *MPT_7B_DIMENSIONS, *CLUSTER, "--seq-len", "65536", "--json"]) == 2
    assert "8192 learned positions" in capsys.readouterr().err


@pytest.mark.parametrize(
    "positions, max_positions, model_type, table",
    [("learned", 65536, "gpt2", 65536 * 4096), ("rope", 65536, "gpt_neox", 0), ("none", None, "mpt", 0)],
)
def test_each_positions_choice(positions, max_positions, model_type, table):
    spec = spec_from_dimensions(hidden=4096, layers=32, heads=32, ffn=16384, vocab=50432, mlp="standard",
                                positions=positions, max_positions=max_positions)  # fmt: skip
    assert spec.model_type == model_type
    assert spec.params.embedding == 50432 * 4096 + table  # tied token table (+ the learned position table)
    if max_positions:
        assert spec.max_position_embeddings == max_positions


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--positions", "alibi", "--max-positions", "4096"], "--positions alibi has neither: drop it"),
        (["--positions", "none", "--max-positions", "4096"], "--positions none has neither: drop it"),
        (["--positions", "rope", "--max-positions", "-1"], "--max-positions must be at least 1"),
        (["--positions", "sinusoid"], "--positions must be learned, rope, alibi or none"),
        (["--mlp", "gated", "--positions", "alibi"], "--mlp gated builds a Llama-shaped model"),
    ],
)
def test_nonsense_is_one_line(flags, message, capsys):
    assert main(["plan", *MPT_7B_DIMENSIONS, *flags, *CLUSTER, "--json"]) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and message in error


def test_positions_shape_only_a_model_given_by_dimensions(capsys):
    assert main(["plan", "--model", "gpt2", "--positions", "alibi", *CLUSTER, "--json"]) == 2
    assert "--positions shapes a model given by its dimensions" in capsys.readouterr().err


@pytest.mark.parametrize(
    "change, field",
    [
        ({"attn_config": "alibi"}, "attn_config"),
        ({"attn_config": {"alibi": "yes"}}, "attn_config.alibi"),
        ({"attn_config": {"qk_ln": True}}, "attn_config.qk_ln"),
        ({"expansion_ratio": 0}, "expansion_ratio"),
        ({"ffn_config": {"ffn_type": "te_ln_mlp"}}, "ffn_config.ffn_type"),
    ],
)
def test_bad_config_names_the_field(change, field):
    with pytest.raises(UserInputError, match=f"field '{field}'"):
        spec_from_hf_config({**_config(), **change}, name="mpt-7b")


def test_mpt_is_planned_not_emitted(tmp_path, capsys):
    argv = ["plan", "--model", str(CONFIG), *CLUSTER, "--seq-len", "2048", "--emit", str(tmp_path / "run")]
    assert main(argv) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and "planned, not emitted" in error
    assert not (tmp_path / "run").exists()


def test_family_entry_names_transformers_block():
    transformers = pytest.importorskip("transformers")
    from planner.models.families import FAMILIES

    assert FAMILIES["mpt"].block_class in transformers.MptForCausalLM._no_split_modules
