"""The matrices LoRA adapts, counted against PEFT and transformers themselves (planner/memory/lora_targets.py).

References: PEFT's own trainable parameters after get_peft_model(LoraConfig(target_modules="all-linear")) on each
family as transformers 5 builds it (the model a plan's user fine-tunes, docs/running.md "Weights"), and the
weights of the modules whose type is exactly nn.Linear, which bitsandbytes stores in 4 bits under QLoRA
(transformers' integrations/bitsandbytes.py). Caught here: every routed expert adapted for every MoE family
(Llama 4, gpt-oss and Qwen2-MoE adapt none), then none at all (Mixtral, Qwen3-MoE and DeepSeek adapt theirs, the
fused gate and up at twice the rank, and their router), k and v as one adapter, and an encoder-decoder's
cross-attention counted in its encoder blocks.
"""

from __future__ import annotations

import pytest

from planner.memory.lora_targets import head_adapter_params, head_linears
from planner.memory.rank_params import rank_params
from planner.models.flops import lora_params_per_token, model_shape
from planner.models.hf_config import spec_from_hf_config
from planner.training_config import TrainingConfig

RANK = 8
SIZES = dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, vocab_size=1000)
# fmt: off
FAMILIES = {
    "llama": dict(intermediate_size=512),
    "mixtral": dict(intermediate_size=512, num_local_experts=8, num_experts_per_tok=2),
    # no head_dim: transformers 5's Qwen3-MoE attention takes hidden / heads (Qwen3's dense config says 128)
    "qwen3_moe": dict(intermediate_size=512, moe_intermediate_size=128, num_experts=8, num_experts_per_tok=2),
    # latent attention, a shared expert, and one dense block first; and DeepSeek-V2's single query projection
    "deepseek_v3": dict(intermediate_size=512, moe_intermediate_size=128, kv_lora_rank=64, q_lora_rank=96,
                        qk_nope_head_dim=32, qk_rope_head_dim=16, v_head_dim=32, n_routed_experts=8,
                        n_shared_experts=1, num_experts_per_tok=2, first_k_dense_replace=1, n_group=1, topk_group=1),
    "deepseek_v2": dict(intermediate_size=512, moe_intermediate_size=128, kv_lora_rank=64, q_lora_rank=None,
                        qk_nope_head_dim=32, qk_rope_head_dim=16, v_head_dim=32, n_routed_experts=8,
                        n_shared_experts=2, num_experts_per_tok=2, first_k_dense_replace=1),
    # a shared expert with a linear sigmoid gate of its own; its experts are not adapted
    "qwen2_moe": dict(intermediate_size=512, moe_intermediate_size=128, shared_expert_intermediate_size=256,
                      num_experts=8, num_experts_per_tok=2),
    # a linear router, a shared expert, and dense blocks interleaved (Maverick's pattern)
    "llama4_text": dict(intermediate_size=128, intermediate_size_mlp=512, num_local_experts=8, num_experts_per_tok=1,
                        interleave_moe_layer_step=2, head_dim=64),
    "gpt_oss": dict(intermediate_size=128, num_local_experts=8, num_experts_per_tok=2, head_dim=64),
    "t5": dict(d_model=256, d_ff=512, d_kv=64, num_layers=2, num_decoder_layers=2, num_heads=4, vocab_size=1000),
    # one query_key_value projection (Conv1D on GPT-2), and Phi-3's one gate_up projection; Falcon's FalconLinear
    "gpt2": dict(n_embd=256, n_layer=2, n_head=4, vocab_size=1000),
    "gpt_neox": dict(hidden_size=256, num_hidden_layers=2, num_attention_heads=4, intermediate_size=512,
                     vocab_size=1000),
    "falcon": dict(hidden_size=256, num_hidden_layers=2, num_attention_heads=4, vocab_size=1000),
    "phi3": dict(SIZES, intermediate_size=512, vocab_size=32064),
    # beside the blocks: BERT's pooler, ViT's classifier
    "bert": dict(hidden_size=256, num_hidden_layers=2, num_attention_heads=4, intermediate_size=512, vocab_size=1000),
    "vit": dict(hidden_size=256, num_hidden_layers=2, num_attention_heads=4, intermediate_size=512, image_size=32,
                patch_size=16, num_labels=10),
}
OWN_SIZES = {"t5", "gpt2", "gpt_neox", "falcon", "phi3", "bert", "vit"}  # their configs name their sizes themselves
# fmt: on


def _config(model_type: str) -> dict:
    sizes = {} if model_type in OWN_SIZES else SIZES
    return {"model_type": model_type, **sizes, **FAMILIES[model_type]}


def _four_bit(model) -> int:
    """The weights bitsandbytes stores in 4 bits, by transformers' own rules: modules whose type is exactly nn.Linear,
    or Conv1D (replace_with_bnb_linear), but those its quantizer skips (get_modules_to_not_convert: tied weights,
    the last parameter's module, the output embeddings, _keep_in_fp32_modules such as T5's wo)."""
    import torch
    from transformers.pytorch_utils import Conv1D
    from transformers.quantizers.base import HfQuantizer
    from transformers.quantizers.quantizers_utils import should_convert_module

    skipped = HfQuantizer.get_modules_to_not_convert(model, None, model._keep_in_fp32_modules)
    return sum(
        m.weight.numel()
        for name, m in model.named_modules()
        if (type(m) is torch.nn.Linear or isinstance(m, Conv1D)) and should_convert_module(name, skipped)
    )


def _references(model_type: str) -> tuple[int, int, int]:
    """(PEFT's trainable parameters, the routed experts' share of them, the weights bitsandbytes makes 4-bit)."""
    torch = pytest.importorskip("torch")
    import transformers
    from peft import LoraConfig, get_peft_model

    config = _config(model_type)
    spec = spec_from_hf_config(config, name="small")
    fields = {key: value for key, value in config.items() if key != "model_type"}
    with torch.device("meta"):
        model = getattr(transformers, spec.transformers_class)._from_config(
            transformers.AutoConfig.for_model(model_type, **fields)
        )
    four_bit = _four_bit(model)
    peft_model = get_peft_model(model, LoraConfig(r=RANK, target_modules="all-linear"), low_cpu_mem_usage=True)
    trained = [(name, p.numel()) for name, p in peft_model.named_parameters() if p.requires_grad]
    assert trained and all("lora" in name for name, _ in trained)
    experts = sum(n for name, n in trained if ".experts." in name)
    return sum(n for _, n in trained), experts, four_bit


@pytest.mark.parametrize("model_type", sorted(FAMILIES))
def test_lora_adapts_what_peft_adapts(model_type):
    spec = spec_from_hf_config(_config(model_type), name="small")
    trainable, routed, four_bit = _references(model_type)
    assert rank_params(spec, TrainingConfig(lora_rank=RANK)).trainable == trainable
    # A token runs top-k of a block's experts, so of the routed experts' adapters k / E of them; a pooler or a
    # classifier beside the blocks runs on one token a sequence (left out of the per-token count).
    per_token = trainable - head_adapter_params(spec, RANK)
    per_token -= routed * (1 - spec.experts_per_token / spec.num_experts) if spec.is_moe else 0
    assert lora_params_per_token(model_shape(spec), RANK) == pytest.approx(per_token, rel=1e-12)
    # QLoRA: the fused experts keep their 16 bits, as does a router that subclasses nn.Linear.
    assert rank_params(spec, TrainingConfig(lora_rank=RANK, qlora=True)).quantized == four_bit
    beside = sum(shape.params for shape in head_linears(spec))  # a pooler or a classifier: not the blocks' dequant
    assert model_shape(spec).qlora_weights_per_block * spec.num_layers == pytest.approx(four_bit - beside)


def test_llava_adapts_its_tower_and_projector_too():
    """PEFT's all-linear on LLaVA takes the CLIP tower's linears and the projector's two beside the language model."""
    torch = pytest.importorskip("torch")
    import transformers
    from peft import LoraConfig, get_peft_model

    text = dict(SIZES, model_type="llama", intermediate_size=512, num_hidden_layers=2)
    vision = dict(model_type="clip_vision_model", hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                  intermediate_size=256, image_size=64, patch_size=16)  # fmt: skip
    spec = spec_from_hf_config(
        {"model_type": "llava", "text_config": text, "vision_config": vision, "image_token_index": 999}, name="small"
    )
    with torch.device("meta"):
        config = transformers.AutoConfig.for_model(
            "llava", text_config=text, vision_config=vision, image_token_index=999
        )
        model = getattr(transformers, spec.transformers_class)._from_config(config)
    four_bit = _four_bit(model)  # before PEFT wraps the modules
    peft_model = get_peft_model(model, LoraConfig(r=RANK, target_modules="all-linear"), low_cpu_mem_usage=True)
    trainable = sum(p.numel() for p in peft_model.parameters() if p.requires_grad)
    assert rank_params(spec, TrainingConfig(lora_rank=RANK)).trainable == trainable
    assert rank_params(spec, TrainingConfig(lora_rank=RANK, qlora=True)).quantized == four_bit


def test_a_catalog_moe_models_adapters():
    """Qwen3-30B-A3B: 48 blocks of q (2048 -> 4096), k and v (2048 -> 512), o (4096 -> 2048), the router (2048 -> 128)
    and 128 experts of gate_up (2048 -> 2 x 768, rank 32) and down (768 -> 2048)."""
    from planner.models.resolve import resolve_model

    spec = resolve_model("qwen3-30b-a3b")
    r, experts = 16, 128
    attention = r * ((2048 + 4096) + 2 * (2048 + 512) + (4096 + 2048))
    moe = r * (2048 + experts) + experts * (2 * r * (2048 + 2 * 768) + r * (768 + 2048))
    assert rank_params(spec, TrainingConfig(lora_rank=r)).trainable == 48 * (attention + moe)


def test_peft_keeps_each_moe_blocks_rebuilt_expert_stack_for_backward():
    """PEFT folds the expert adapters into the weights on every forward (W + BA, one baddbmm over the stack) and the
    experts' matmuls save that stack, beside the factors cast to its width: measured with torch's saved-tensor hooks
    on a bf16 Qwen3-MoE forward (the frozen weights themselves excluded: they are held anyway)."""
    torch = pytest.importorskip("torch")
    import transformers
    from peft import LoraConfig, get_peft_model

    from planner.memory.activation_batch import estimate_activations
    from planner.memory.activations import activation_widths
    from planner.memory.lora_targets import rebuilt_expert_bytes

    config = _config("qwen3_moe")
    spec = spec_from_hf_config(config, name="small")
    fields = {key: value for key, value in config.items() if key != "model_type"}
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model("qwen3_moe", **fields))
    model = get_peft_model(model.to(torch.bfloat16), LoraConfig(r=RANK, target_modules="all-linear"))
    held = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved: dict[int, int] = {}

    def pack(tensor):
        storage = tensor.untyped_storage()
        if tensor.dim() == 3 and tensor.shape[0] == spec.num_experts and storage.data_ptr() not in held:
            saved[storage.data_ptr()] = storage.nbytes()
        return tensor

    ids = torch.randint(0, 1000, (1, 64))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        model(input_ids=ids, labels=ids).loss  # noqa: B018 (the forward is what saves)
    plan = TrainingConfig(lora_rank=RANK, precision="bf16")
    assert sum(saved.values()) == rebuilt_expert_bytes(spec, plan) * spec.num_layers
    # The estimate keeps one per MoE block without checkpointing, and one (the recomputed block's) with it.
    widths = activation_widths(plan, native_mixed=True)
    for checkpointing, kept in (("none", spec.num_layers), ("full", 1)):
        lora = TrainingConfig(lora_rank=RANK, precision="bf16", activation_checkpointing=checkpointing)
        base = TrainingConfig(precision="bf16", activation_checkpointing=checkpointing)
        with_lora, without = (estimate_activations(spec, c, widths) for c in (lora, base))
        grown = (with_lora.activations + with_lora.recompute) - (without.activations + without.recompute)
        assert grown == pytest.approx(rebuilt_expert_bytes(spec, lora) * kept)


def test_data_parallel_gradients_are_the_adapters_only():
    """DDP buckets only the parameters that require grad (torch's Reducer), FSDP and ZeRO reduce only those: under
    LoRA the all-reduce carries rank_params' trainable count, not the model's."""
    from planner.hardware.cluster import make_cluster
    from planner.models.resolve import resolve_model
    from planner.throughput.collectives import all_reduce_s, cluster_links, process_group
    from planner.throughput.communication import communication_plan
    from planner.throughput.constants import CONSTANTS

    for name in ("llama-3-8b", "qwen3-30b-a3b"):
        spec = resolve_model(name)
        links = cluster_links(make_cluster("H100-80GB", 8, 2), CONSTANTS.link_efficiency)
        config = TrainingConfig(strategy="ddp", lora_rank=16, precision="bf16-mixed")
        plan = communication_plan(
            model_shape(spec), config, links, world_size=16, pcie_Bps=16e9, memory_Bps=3e12, k=CONSTANTS, nvme_Bps=0
        )
        adapters = rank_params(spec, config).trainable
        expected = all_reduce_s(links, process_group(16, 1, 8), adapters * 4)  # DDP's fp32 gradients under autocast
        assert plan.all_reduce == pytest.approx(expected, rel=1e-9)
    # The traffic's count is the memory's, for every catalog model (a pooler, a tower and the experts included).
    from planner.models.catalog import load_catalog

    for spec in load_catalog():
        trainable = rank_params(spec, TrainingConfig(lora_rank=16)).trainable
        assert 16 * model_shape(spec).adapters_at_rank_1 == pytest.approx(trainable, abs=2), spec.name


def test_peft_adapted_experts_add_the_folds_and_their_weight_gradient():
    """torch's FlopCounterMode on a PEFT Qwen3-MoE forward and backward, all-linear against the same adapters without
    the experts': the difference is the folds (twice forward: torch's parametrization check evaluates it once more;
    twice backward: the factors' gradients) and the experts' weight gradient, as compute.py charges them."""
    torch = pytest.importorskip("torch")
    import transformers
    from peft import LoraConfig, get_peft_model
    from torch.utils.flop_counter import FlopCounterMode

    from planner.throughput.compute import peft_expert_flops

    config = _config("qwen3_moe")
    spec = spec_from_hf_config(config, name="small")
    fields = {key: value for key, value in config.items() if key != "model_type"}
    tokens = 64

    def step_flops(lora: LoraConfig) -> int:
        torch.manual_seed(0)
        model = transformers.AutoModelForCausalLM.from_config(
            transformers.AutoConfig.for_model("qwen3_moe", **fields),
            experts_implementation="eager",  # FlopCounterMode does not count the grouped-mm path's ops
            attn_implementation="eager",
        )
        model = get_peft_model(model, lora)
        ids = torch.randint(0, 1000, (1, tokens))
        with FlopCounterMode(display=False) as counter:
            model(input_ids=ids, labels=ids).loss.backward()
        return counter.get_total_flops()

    everything = step_flops(LoraConfig(r=RANK, target_modules="all-linear"))
    attention = ["q_proj", "k_proj", "v_proj", "o_proj"]
    but_experts = step_flops(LoraConfig(r=RANK, target_modules=attention, target_parameters=["gate.weight"]))
    plan = TrainingConfig(lora_rank=RANK, seq_len=tokens)
    assert everything - but_experts == peft_expert_flops(model_shape(spec), plan, tokens) * spec.num_layers
