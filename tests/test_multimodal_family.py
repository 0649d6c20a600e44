"""The multimodal family planned end to end: LLaVA-style models (a CLIP vision tower, a projector, an LLM)
and CLIP itself (text and vision towers trained on a contrastive loss).

References:
- parameter counts: transformers' LlavaForConditionalGeneration and CLIPModel built on the meta device (the
  catalog's source), which the formula must equal; LLaVA-1.5's published sizes are 7.06B and 13.35B, CLIP's
  (Radford et al. 2021 model cards) 151.3M (ViT-B/32), 149.6M (B/16) and 427.6M (L/14);
- FLOPs: torch's FlopCounterMode over a real forward and backward (fake tensors);
- memory: MemTracker traces of the real models (tests/test_memory_vs_trace.py rows llava-* and clip-*,
  docs/accuracy.md).
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


def _config(name: str) -> dict:
    return json.loads((CATALOG_DIR / "models" / f"{name}.json").read_text(encoding="utf-8"))["config"]


@pytest.mark.parametrize("name, billions", [("llava-1.5-7b", 7.06), ("llava-1.5-13b", 13.35)])
def test_formula_equals_the_meta_device_count_and_the_published_size(name, billions):
    spec = resolve_model(name)
    assert spec.params.source == "meta-device" and spec.modality == "image-text"
    formula = spec_from_hf_config(_config(name), name=name).params
    assert formula.model_dump(exclude={"source", "source_detail"}) == spec.params.model_dump(
        exclude={"source", "source_detail"}
    )
    assert spec.params.total / 1e9 == pytest.approx(billions, abs=0.005)
    tower = spec.vision_tower
    assert tower is not None and tower.params.total == 303_507_456  # CLIP ViT-L/14-336's vision model
    assert spec.image_tokens == 24 * 24  # 336 / 14 squared; the "default" strategy drops the class token


def test_a_list_of_feature_layers_widens_the_projector_as_transformers_builds_it():
    """An audit: vision_feature_layer [-2, -5] (concatenated features) was counted one tower wide, 4096 x 1024
    parameters short of the meta-device count."""
    from planner.models.param_count import count_params_on_meta

    config = {**_config("llava-1.5-7b"), "vision_feature_layer": [-2, -5]}
    formula = spec_from_hf_config(config, name="llava-two-layers").params
    assert formula.total == count_params_on_meta(config).total
    assert formula.total - spec_from_hf_config(_config("llava-1.5-7b"), name="one").params.total == 1024 * 4096
    with pytest.raises(ConfigFieldError, match="vision_feature_layer"):
        spec_from_hf_config({**config, "vision_feature_layer": []}, name="none")


def test_a_published_config_without_llm_dimensions_reads_llamas_defaults():
    """llava-hf/llava-1.5-7b-hf leaves the Vicuna dimensions to LlamaConfig's defaults."""
    spec = resolve_model("llava-1.5-7b")
    assert (spec.hidden_size, spec.num_layers, spec.ffn_size, spec.vocab_size) == (4096, 32, 11008, 32064)


def test_unsupported_towers_and_languages_are_one_line_errors():
    config = _config("llava-1.5-7b")
    for key, value, field in (
        ("vision_config", {**config["vision_config"], "model_type": "siglip_vision_model"}, "vision_config"),
        ("text_config", {**config["text_config"], "model_type": "gpt2"}, "text_config"),
    ):
        with pytest.raises(ConfigFieldError, match=field) as error:
            spec_from_hf_config({**config, key: value}, name="odd")
        assert "\n" not in str(error.value)


@pytest.mark.slow
def test_model_flops_match_torchs_flop_counter_on_the_real_model():
    torch = pytest.importorskip("torch")
    from unittest import mock

    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils.flop_counter import FlopCounterMode
    from transformers import AutoConfig, AutoModelForImageTextToText
    from transformers.initialization import no_init_weights

    config = _config("llava-1.5-7b")
    config["text_config"] = {**config["text_config"], "hidden_size": 1024, "intermediate_size": 2816,
                             "num_hidden_layers": 4, "num_attention_heads": 8}  # fmt: skip
    fields = {key: value for key, value in config.items() if key != "model_type"}
    seq_len = 1024
    with (
        FakeTensorMode(),
        no_init_weights(),
        mock.patch("transformers.models.llava.modeling_llava.torch_compilable_check", lambda *args: None),
    ):
        model = AutoModelForImageTextToText.from_config(
            AutoConfig.for_model("llava", **fields), attn_implementation="eager"
        )
        input_ids = torch.randint(0, 32000, (1, seq_len))
        input_ids[:, :576] = 32000
        with FlopCounterMode(display=False) as counter:
            model(pixel_values=torch.randn(1, 3, 336, 336), input_ids=input_ids, labels=input_ids).loss.backward()
    ours = sequence_flops(model_shape(spec_from_hf_config(config, name="small")), TrainingConfig(seq_len=seq_len))
    # LLaVA reads the tower's second-to-last layer: its last layer runs forward only, which we count as
    # trained (+2% here, where the tower is a fifth of the work; less beside a 7B LLM).
    assert ours.model == pytest.approx(counter.get_total_flops(), rel=0.03)


def test_plan_counts_the_tower_and_refuses_a_text_run_folder(capsys, tmp_path):
    argv = ["plan", "--model", "llava-1.5-7b", "--gpu", "A100-80GB", "--gpus-per-node", "8", "--json"]
    assert main([*argv, "--global-batch", "128"]) == 0
    best = json.loads(capsys.readouterr().out)["best"]
    assert best["config"]["seq_len"] == 2048
    assert main([*argv[:-1], "--global-batch", "128", "--emit", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip()
    assert "multimodal model" in err and "\n" not in err and not (tmp_path / "run").exists()


def test_the_tower_adds_its_activations_and_a_short_sequence_is_refused():
    from planner.memory.activation_batch import estimate_activations
    from planner.memory.activations import activation_widths

    spec = resolve_model("llava-1.5-7b")
    config = TrainingConfig(micro_batch=4, seq_len=1024, precision="bf16-mixed")
    widths = activation_widths(config, native_mixed=True)
    llm_only = spec.model_copy(update={"vision_tower": None, "image_tokens": 0, "projector_params": 0})
    extra = (
        estimate_activations(spec, config, widths).activations
        - estimate_activations(llm_only, config, widths).activations
    )
    # 24 CLIP-L blocks over 577 positions for 4 images: gigabytes, not a rounding error.
    assert 1 * 2**30 < extra < 8 * 2**30
    with pytest.raises(UserInputError, match="leaves no text after llava-1.5-7b's 576 image tokens"):
        TrainingConfig(seq_len=512).check_against(spec, world_size=1, gpus_per_node=1)


def test_the_selector_plans_multimodal_and_keeps_modalities_apart():
    config = get_distributed_training_config("multimodal", "llava-hf/llava-1.5-7b-hf", gpu_count=8, batch_size=4)
    assert config["fits"] and config["sequence_length"] == 2048
    with pytest.raises(UserInputError, match="a multimodal decoder-only, not a 'text_generation' model"):
        get_distributed_training_config("text_generation", "llava-1.5-7b", gpu_count=8, batch_size=4)


@pytest.mark.parametrize(
    "name, millions",
    [("clip-vit-base-patch32", 151.28), ("clip-vit-base-patch16", 149.62), ("clip-vit-large-patch14", 427.62)],
)
def test_clip_formula_equals_the_meta_device_count_and_the_published_size(name, millions):
    spec = resolve_model(name)
    assert spec.params.source == "meta-device" and spec.modality == "image-text" and spec.output_head is False
    formula = spec_from_hf_config(_config(name), name=name).params
    assert formula.total == spec.params.total and formula.embedding == spec.params.embedding
    assert spec.params.total / 1e6 == pytest.approx(millions, abs=0.01)
    assert spec.max_position_embeddings == 77 and spec.image_tokens == 0  # the image is not in the text


@pytest.mark.slow
def test_clip_flops_match_torchs_flop_counter_on_the_real_model():
    torch = pytest.importorskip("torch")
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils.flop_counter import FlopCounterMode
    from transformers import AutoConfig, AutoModel
    from transformers.initialization import no_init_weights

    fields = {key: value for key, value in _config("clip-vit-base-patch16").items() if key != "model_type"}
    pairs = 2
    with FakeTensorMode(), no_init_weights():
        model = AutoModel.from_config(AutoConfig.for_model("clip", **fields), attn_implementation="eager")
        pixels, input_ids = torch.randn(pairs, 3, 224, 224), torch.randint(0, 49408, (pairs, 77))
        with FlopCounterMode(display=False) as counter:
            model(pixel_values=pixels, input_ids=input_ids, return_loss=True).loss.backward()
    per_pair = sequence_flops(model_shape(resolve_model("clip-vit-base-patch16")), TrainingConfig(seq_len=77)).model
    # The vision tower (197 positions) does most of the work: without it the count would be a third.
    assert per_pair * pairs == pytest.approx(counter.get_total_flops(), rel=0.01)


def test_clip_plans_on_its_77_tokens_through_the_selector():
    config = get_distributed_training_config("multimodal", "openai/clip-vit-large-patch14", gpu_count=8, batch_size=256)
    assert config["fits"] and config["sequence_length"] == 77 and config["effective_batch_size"] == 2048
    with pytest.raises(UserInputError, match="multimodal encoder-only, not a 'text_embedding' model"):
        get_distributed_training_config("text_embedding", "clip-vit-base-patch32", gpu_count=1, batch_size=8)


def test_serving_a_multimodal_model_is_refused_in_one_line(capsys):
    """The serving roofline knows the LLM, not the tower: no silently partial answer."""
    assert main(["plan", "--model", "llava-1.5-7b", "--gpu", "A100-80GB", "--mode", "inference"]) == 2
    err = capsys.readouterr().err.strip()
    assert "reads images as well as text" in err and "\n" not in err
