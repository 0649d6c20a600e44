"""The audio family: Whisper planned for training end to end, its counts, FLOPs and memory checked.

References:
- parameter counts: transformers' WhisperForConditionalGeneration built on the meta device (the catalog's
  source), which the formula must equal; the Whisper paper (Radford et al. 2022, Table 1) rounds them to
  39M, 74M, 244M, 769M and 1550M;
- FLOPs: torch's FlopCounterMode over a real forward and backward of whisper-tiny (fake tensors);
- memory: MemTracker traces of the real model (tests/test_memory_vs_trace.py rows whisper-*,
  docs/accuracy.md), re-checked here against the trace of a step with a longer text.
"""

from __future__ import annotations

import json

import pytest

from hardware_selector import get_distributed_training_config
from hardware_selector_cli.app import main
from planner.errors import ConfigFieldError, UserInputError
from planner.models.catalog import CATALOG_DIR
from planner.models.flops import model_shape, sequence_flops
from planner.models.hf_config import spec_from_hf_config
from planner.models.resolve import resolve_model
from planner.training_config import TrainingConfig

# Whisper paper, Table 1 (millions, rounded as printed).
PAPER_SIZES = {"whisper-tiny": 39, "whisper-base": 74, "whisper-small": 244, "whisper-medium": 769,
               "whisper-large-v3": 1550}  # fmt: skip


def _config(name: str) -> dict:
    return json.loads((CATALOG_DIR / "models" / f"{name}.json").read_text(encoding="utf-8"))["config"]


@pytest.mark.parametrize("name", [*PAPER_SIZES, "whisper-large-v3-turbo"])
def test_formula_equals_the_meta_device_count_and_the_paper_size(name):
    spec = resolve_model(name)
    assert spec.params.source == "meta-device" and spec.modality == "audio"
    formula = spec_from_hf_config(_config(name), name=name).params
    assert formula.model_dump(exclude={"source", "source_detail"}) == spec.params.model_dump(
        exclude={"source", "source_detail"}
    )
    # The sinusoid table over the 1500 audio positions is frozen.
    assert spec.params.total - spec.params.trainable == 1500 * spec.hidden_size
    if name in PAPER_SIZES:
        assert spec.params.total / 1e6 == pytest.approx(PAPER_SIZES[name], rel=0.035)


def test_turbo_reads_a_deep_encoder_and_a_shallow_decoder():
    spec = resolve_model("openai/whisper-large-v3-turbo")
    assert (spec.num_encoder_layers, spec.num_decoder_layers, spec.mel_bins) == (32, 4, 128)
    assert spec.encoder_seq_len == 1500 and spec.max_position_embeddings == 448


def test_stacks_of_different_widths_are_refused_in_one_line():
    config = {**_config("whisper-tiny"), "decoder_ffn_dim": 2048}
    with pytest.raises(ConfigFieldError, match="decoder_ffn_dim.*differs from encoder_ffn_dim"):
        spec_from_hf_config(config, name="odd")


@pytest.mark.slow
@pytest.mark.parametrize("seq_len", [448, 64])
def test_model_flops_match_torchs_flop_counter_on_the_real_model(seq_len):
    """Encoder work is fixed by the 30 s window: at 64 text tokens it dominates, at 448 the decoder grows."""
    torch = pytest.importorskip("torch")
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils.flop_counter import FlopCounterMode
    from transformers import WhisperConfig, WhisperForConditionalGeneration
    from transformers.initialization import no_init_weights

    fields = {k: v for k, v in _config("whisper-tiny").items() if k != "model_type"}
    with FakeTensorMode(), no_init_weights():
        model = WhisperForConditionalGeneration(WhisperConfig(**fields, attn_implementation="eager"))
        features, labels = torch.randn(1, 80, 3000), torch.randint(0, 51865, (1, seq_len))
        with FlopCounterMode(display=False) as counter:
            model(input_features=features, labels=labels).loss.backward()
    ours = sequence_flops(model_shape(resolve_model("whisper-tiny")), TrainingConfig(seq_len=seq_len)).model
    assert ours == pytest.approx(counter.get_total_flops(), rel=0.01)


def test_plan_trains_whisper_on_its_text_length_and_refuses_a_text_run_folder(capsys, tmp_path):
    argv = ["plan", "--model", "whisper-large-v3", "--gpu", "A100-80GB", "--gpus-per-node", "8", "--json"]
    assert main([*argv, "--global-batch", "256"]) == 0
    best = json.loads(capsys.readouterr().out)["best"]
    assert best["config"]["seq_len"] == 448  # the decoder's positions, not the default 2048
    assert main([*argv[:-1], "--global-batch", "256", "--emit", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip()
    assert "audio model" in err and "\n" not in err and not (tmp_path / "run").exists()


def test_the_selector_plans_audio_and_keeps_modalities_apart():
    config = get_distributed_training_config("audio", "openai/whisper-small", gpu_count=4, batch_size=16)
    assert config["fits"] and config["sequence_length"] == 448 and config["effective_batch_size"] == 64
    for family, model in (("text_generation", "whisper-small"), ("speech_recognition", "t5-small")):
        with pytest.raises(UserInputError, match=f"not a '{family}' model"):
            get_distributed_training_config(family, model, gpu_count=1, batch_size=8)


def test_the_encoder_costs_the_same_whatever_the_text_length():
    """Memory per step falls with the text, but not below what the 1500-position encoder keeps."""
    from planner.memory.estimate import estimate_memory

    spec = resolve_model("whisper-small")

    def activations(seq_len: int) -> float:
        config = TrainingConfig(micro_batch=8, seq_len=seq_len, precision="bf16-mixed")
        estimate = estimate_memory(spec, config, world_size=1, gpus_per_node=1, gpu_capacity_bytes=2**40)
        return estimate.per_gpu_bytes["activations"]

    short, long = activations(32), activations(448)
    assert short < long < 2 * short  # the encoder's share does not shrink with the text
