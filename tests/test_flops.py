"""Training FLOPs against the published formulas in the shared reference."""

import pytest

from benchmarks.accuracy.calibrate_throughput import MPT_SHAPES, mpt_spec
from planner.models.flops import model_shape, sequence_flops
from planner.models.resolve import resolve_model, spec_from_dimensions
from planner.training_config import TrainingConfig
from tests.reference_data import published_reference

H, L, V, HEADS = 2048, 24, 50257, 16


@pytest.fixture(scope="module")
def gpt_shape():
    return model_shape(spec_from_dimensions(hidden=H, layers=L, heads=HEADS, ffn=4 * H, vocab=V, mlp="standard"))


@pytest.mark.parametrize("seq", [512, 2048, 8192])
def test_model_flops_match_korthikanti_eq7(gpt_shape, seq):
    assert (
        "72*B*L*s*h^2"
        in published_reference()["activation_memory_korthikanti_2022"]["flops_appendix_A"]["model_flops_per_iteration"]
    )
    eq7 = 72 * L * seq * H**2 * (1 + seq / (6 * H) + V / (12 * H * L))
    ours = sequence_flops(gpt_shape, TrainingConfig(seq_len=seq)).model
    # Eq. 7 leaves out biases and norm weights (0.1% of a GPT's weights).
    assert ours == pytest.approx(eq7, rel=2e-3)


def test_full_recompute_matches_megatron_eq3(gpt_shape):
    assert "96*B*s*l*h^2" in published_reference()["megatron_2021_formulas"]["formulas"]["flops_per_iteration"]
    seq = 2048
    eq3 = 96 * seq * L * H**2 * (1 + seq / (6 * H) + V / (16 * L * H))
    ours = sequence_flops(gpt_shape, TrainingConfig(seq_len=seq, activation_checkpointing="full")).hardware
    assert ours == pytest.approx(eq3, rel=2e-3)


def test_selective_recompute_lies_between_eq7_and_eq8(gpt_shape):
    seq = 4096
    eq7 = 72 * L * seq * H**2 * (1 + seq / (6 * H) + V / (12 * H * L))
    eq8 = 72 * L * seq * H**2 * (1 + seq / (3 * H) + V / (12 * H * L))
    flops = sequence_flops(gpt_shape, TrainingConfig(seq_len=seq, activation_checkpointing="selective"))
    assert eq7 < flops.hardware < eq8
    assert flops.model == pytest.approx(eq7, rel=2e-3)


def test_model_flops_match_llm_foundry_mfu_definition():
    """mfu = (6·N·seq + 12·n_layers·d_model·seq²) per sequence, N = the row's parameter count."""
    for row in published_reference()["calibration_llm_foundry_a100_40gb"]["rows"]:
        d_model, layers, _ = MPT_SHAPES[row["model"]]
        s = row["seq_len"]
        # Their N also counts the learned position table (seq x d_model), which does no matmul.
        matmul_params = row["num_params"] - s * d_model
        theirs = 6 * matmul_params * s + 12 * layers * d_model * s * s
        ours = sequence_flops(model_shape(mpt_spec(row["model"], s)), TrainingConfig(seq_len=s)).model
        assert ours == pytest.approx(theirs, rel=3e-3), row


def test_moe_counts_active_parameters_only():
    spec = resolve_model("mixtral-8x7b")
    shape = model_shape(spec)
    seq = 4096
    flops = sequence_flops(shape, TrainingConfig(seq_len=seq)).model
    attention = 12 * spec.num_layers * seq * seq * spec.num_heads * spec.head_dim
    # Mistral AI: 12.9B parameters active per token (of 46.7B); the input embedding does no matmul.
    active_matmul = 12.9e9 - spec.vocab_size * spec.hidden_size
    assert (flops - attention) / (6 * seq) == pytest.approx(active_matmul, rel=0.01)


def test_lora_skips_the_frozen_weight_gradients():
    shape = model_shape(resolve_model("llama-2-7b"))
    full = sequence_flops(shape, TrainingConfig(seq_len=2048)).model
    lora = sequence_flops(shape, TrainingConfig(seq_len=2048, lora_rank=16)).model
    # Forward (2N) + input gradient (2N) of 6N, plus tiny adapters; attention keeps its full backward.
    assert 4 / 6 < lora / full < 0.70


def test_encoder_decoder_counts_both_stacks_and_cross_attention():
    spec = resolve_model("t5-base")
    shape = model_shape(spec)
    seq = 512
    flops = sequence_flops(shape, TrainingConfig(seq_len=seq)).model
    squares = spec.num_encoder_layers + 2 * spec.num_decoder_layers
    attention = 12 * seq * seq * spec.num_heads * spec.head_dim * squares
    # Every weight of each stack sees `seq` tokens; T5 ties its head to the shared embedding.
    assert flops - attention == pytest.approx(6 * spec.params.total * seq, rel=0.01)
