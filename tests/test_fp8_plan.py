"""FP8 training, planned (not run: it needs an FP8 GPU; docs/accuracy.md, "FP8").

References: the GPU catalog's dense FP8 and bf16 peaks (shared/reference/published_reference.yaml: H100 SXM
989 and 1979 TFLOP/s), which bound the block matmuls' speed-up; Transformer Engine's memory layout as the
planner's docstrings state it (an FP8 copy of each block matmul's input kept for backward, each block weight
and its transpose cast to FP8 once per step), checked here byte for byte against the formula's own terms.
"""

from __future__ import annotations

import json

import pytest

from hardware_selector_cli.app import main
from planner.hardware.cluster import make_cluster
from planner.memory.activation_batch import estimate_activations
from planner.memory.activations import activation_widths
from planner.memory.estimate import estimate_memory
from planner.memory.rank_params import linear_params, rank_params
from planner.models.flops import model_shape
from planner.models.resolve import resolve_model
from planner.throughput.compute import _block_matmuls_forward_s
from planner.throughput.constants import CONSTANTS
from planner.throughput.kernels import Device
from planner.training_config import TrainingConfig

SPEC = resolve_model("llama-3.1-8b")


def _config(**fields) -> TrainingConfig:
    return TrainingConfig(strategy="fsdp", seq_len=8192, micro_batch=2, precision="bf16-mixed", **fields)


def test_each_block_matmul_input_is_kept_in_one_byte():
    bf16, fp8 = _config(), _config(fp8=True)
    widths = activation_widths(bf16, native_mixed=True)  # FSDP mixed precision: 16-bit weights, no autocast
    saved = estimate_activations(SPEC, bf16, widths).activations - estimate_activations(SPEC, fp8, widths).activations
    tokens = 2 * 8192
    per_token = 2 * SPEC.hidden_size + SPEC.num_heads * SPEC.head_dim + SPEC.ffn_size  # two norms, o_proj, down_proj
    assert saved == pytest.approx(SPEC.num_layers * tokens * per_token, rel=1e-9)


def test_the_weights_are_cast_once_per_step_with_their_transposes():
    """Where every rank holds the weights (ZeRO-1 here), each block weight is cast to FP8 with its transpose."""
    bf16 = TrainingConfig(strategy="deepspeed", zero_stage=1, seq_len=8192, micro_batch=1, precision="bf16-mixed")
    fp8 = bf16.model_copy(update={"fp8": True})
    on_h100 = dict(world_size=8, gpus_per_node=8, gpu_capacity_bytes=80 * 2**30)
    extra = estimate_memory(SPEC, fp8, **on_h100).per_gpu_bytes["buffers"]
    base = estimate_memory(SPEC, bf16, **on_h100).per_gpu_bytes["buffers"]
    block_linears, _ = linear_params(SPEC, fp8, rank_params(SPEC, fp8), include_experts=True)
    assert extra - base == pytest.approx(2 * block_linears, rel=1e-9)


def test_sharded_fsdp_gathers_fp8_weights_instead_of_copying_them():
    """torchao's float8 all-gather under FSDP2: a gathered unit holds FP8 weights and their transposes (the 2 bytes
    per weight its bf16 gather held), with no FP8 copy of the whole model; and the all-gathers move 1 byte per
    block weight, so the FSDP step's gather traffic shrinks towards half."""
    from planner.throughput.estimate import estimate_throughput

    bf16, fp8 = _config(), _config(fp8=True)
    on_h100 = dict(world_size=16, gpus_per_node=8, gpu_capacity_bytes=80 * 2**30)
    assert estimate_memory(SPEC, fp8, **on_h100).per_gpu_bytes["buffers"] == pytest.approx(
        estimate_memory(SPEC, bf16, **on_h100).per_gpu_bytes["buffers"], rel=1e-9
    )
    cluster = make_cluster("H100-80GB", 8, 2)
    gathers = [estimate_throughput(SPEC, c, cluster).breakdown.data_parallel_comm_s for c in (bf16, fp8)]
    assert 0.55 * gathers[0] < gathers[1] < 0.9 * gathers[0]


def test_block_matmuls_speed_up_by_at_most_the_peak_ratio():
    """Large matmuls approach bf16 peak / FP8 peak (1/2 on an H100); the casts keep it above that."""
    h100 = make_cluster("H100-80GB", gpus_per_node=8).gpu
    peak = h100.dense_tflops.bf16 * 1e12
    device = Device(
        peak, peak * 0.8, peak * 0.6, h100.memory_bandwidth_GBps * 1e9, 2, h100.dense_tflops.fp8 * 1e12 * 0.8
    )
    shape, rows = model_shape(SPEC), 2 * 8192.0
    bf16 = _block_matmuls_forward_s(shape, _config(), device, CONSTANTS, rows)
    fp8 = _block_matmuls_forward_s(shape, _config(fp8=True), device, CONSTANTS, rows)
    ratio = fp8 / bf16
    assert h100.dense_tflops.bf16 / h100.dense_tflops.fp8 < ratio < 0.65


def test_plan_with_fp8_is_faster_says_so_and_is_not_emitted(capsys, tmp_path):
    argv = ["plan", "--model", "llama-3.1-8b", "--gpu", "H100-80GB", "--gpus-per-node", "8", "--global-batch", "256",
            "--seq-len", "8192", "--json"]  # fmt: skip
    assert main(argv) == 0
    bf16 = json.loads(capsys.readouterr().out)["best"]
    assert main([*argv, "--fp8"]) == 0
    fp8 = json.loads(capsys.readouterr().out)["best"]
    assert fp8["config"]["fp8"] and fp8["throughput"]["tokens_per_s"] > bf16["throughput"]["tokens_per_s"]
    assert "FP8 block matmuls" in fp8["throughput"]["sources"]["fp8"]
    assert main([*argv[:-1], "--fp8", "--emit", str(tmp_path / "run")]) == 2
    assert "FP8 is planned, not emitted" in capsys.readouterr().err and not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["estimate", "-m", "llama-3.1-8b", "--gpu", "A100-80GB", "--fp8"], "A100-80GB has no FP8 matmuls"),
        (["plan", "--model", "llama-3.1-8b", "--gpu", "V100-32GB", "--fp8"], "V100-32GB has no FP8 matmuls"),
        (
            ["estimate", "-m", "llama-3.1-8b", "--gpu", "H100-80GB", "--fp8", "--precision", "fp32"],
            "FP8 matmuls run inside bf16 mixed precision",
        ),  # fmt: skip
    ],
)
def test_what_cannot_run_fp8_is_one_line(capsys, argv, message):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err


def test_lora_with_fp8_is_refused_in_one_line(capsys):
    argv = ["estimate", "-m", "llama-3.1-8b", "--gpu", "H100-80GB", "--fp8", "--lora-rank", "16"]
    assert main(argv) == 2
    assert capsys.readouterr().err.strip() == (
        "error: --fp8 is planned for full training; LoRA's frozen base is not cast to FP8 here"
    )


def test_fp8_suggestions_name_only_gpus_with_fp8(capsys):
    """Nothing fits on one L4: the suggested GPUs are ones that have FP8 matmuls (it used to stop with an FP8
    error about the first catalog GPU without them)."""
    from planner.hardware.gpus import resolve_gpu

    argv = ["plan", "--model", "llama-3.1-8b", "--gpu", "L4", "--gpus-per-node", "1", "--global-batch", "8",
            "--seq-len", "4096", "--fp8", "--json"]  # fmt: skip
    main(argv)
    captured = capsys.readouterr()
    assert "no FP8 matmuls" not in captured.err
    line = next(line for line in json.loads(captured.out)["suggestions"] if "these catalog GPUs fit" in line)
    named = [name.strip() for name in line.split("fit:")[1].split(",")]
    assert named and all(resolve_gpu(name).dense_tflops.fp8 for name in named)


def test_expert_parallel_ranks_cast_only_their_own_experts():
    """Under expert parallelism each rank casts the experts it holds, not every expert of the block: Mixtral 8x7B
    at ep 8 holds one expert a block. Reference: its config.json's shapes (hidden 4096, 32 query and 8 key-value
    heads of 128, one expert's three 4096 x 14336 matrices), 32 blocks."""
    mixtral = resolve_model("mixtral-8x7b")
    attention = 2 * 4096 * 4096 + 2 * 4096 * 1024
    for ep, experts in ((8, 1), (2, 4), (1, 8)):
        config = TrainingConfig(strategy="engine", expert_parallel=ep, seq_len=4096, precision="bf16-mixed", fp8=True)
        block_linears, _ = linear_params(mixtral, config, rank_params(mixtral, config), include_experts=True)
        assert block_linears == 32 * (attention + experts * 3 * 4096 * 14336)


@pytest.mark.parametrize(
    "name", ["llama-4-maverick", "llama-4-scout", "mixtral-8x7b", "qwen3-30b-a3b", "deepseek-v3", "deepseek-v2-lite"]
)
def test_the_block_weights_cast_add_up_to_the_models_parameters(name: str):
    """What FP8 (or autocast) casts of the blocks, with the embeddings, is the model's parameter count (the catalog's,
    counted from its config.json on the meta device) within 0.2% (norms, routers and biases are not cast): Llama 4
    Maverick's dense blocks (every second one) hold a dense MLP, not 128 experts and a shared one (1.96x before
    2026-11-29); DeepSeek's latent attention its five matrices (param_formula.py's count), not a plain attention's
    (1.047x for DeepSeek-V3 before)."""
    spec = resolve_model(name)
    config = TrainingConfig(strategy="engine", precision="bf16-mixed")
    block_linears, _ = linear_params(spec, config, rank_params(spec, config), include_experts=True)
    assert (block_linears + spec.params.embedding) / spec.params.total == pytest.approx(1.0, abs=0.002)
