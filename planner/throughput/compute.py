"""GPU time of one micro-batch on the busiest pipeline stage: forward, backward, recompute.

Each block is costed from its shapes (kernels.py): the projections and MLP as
matmuls sharded by tensor parallelism, the attention core (flash kernels skip
the causal half; the eager path materialises s x s scores; an unfused softmax chain such as
Megatron-LM 2019's or transformers' eager attention adds the s x s passes attention_chain.py traced), and the
element-wise work. The matmul time is rescaled so its FLOPs equal the
parameter-based count (flops.py), which carries biases, cross-attention and
shared experts that the generic shapes leave out. The last stage also runs the
LM head and the loss over the vocabulary (fp32 logits); under pipeline
parallelism the step is paced by the slowest rank, its blocks plus the head on
the last one, so a stage map that lightens the last rank (7, 8 x 14, 7, or an
empty head-only chunk) moves the pace to a middle rank.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from planner.contract.layout import layers_per_rank
from planner.models.flops import ModelShape, attention_square_layers, block_params_per_token
from planner.throughput.attention_chain import score_chain_seconds
from planner.throughput.constants import ThroughputConstants
from planner.throughput.kernel_stack import KernelStack, activation_bytes_per_row, unfused_bytes_per_row
from planner.throughput.kernels import Device, elementwise_seconds, flash_attention_seconds, matmul_seconds
from planner.training_config import ActivationCheckpointing, AttentionKernel, TrainingConfig

NF4_DEQUANT_BYTES_PER_WEIGHT = 2.5  # read 4-bit weight (+ scales), write the bf16 copy


@dataclass(slots=True)
class StageCompute:
    forward_s: float
    backward_s: float
    recompute_s: float
    blocks: int  # blocks on this stage
    attention_s: float  # of the above, the blocks' attention core (forward, backward, any recompute)
    # Of the above, the blocks' linear layers (forward, backward, any recompute): what a tensor-parallel collective
    # split into the GEMM beside it (Transformer Engine's userbuffers overlap) can run under.
    matmul_s: float
    launch_bound: bool  # the host cannot launch kernels as fast as the GPU finishes them

    @property
    def total_s(self) -> float:
        return self.forward_s + self.backward_s + self.recompute_s


def _block_matmuls_forward_s(
    shape: ModelShape, config: TrainingConfig, device: Device, k: ThroughputConstants, rows: float
) -> float:
    tp = config.tensor_parallel
    (qkv_in, qkv_out), (o_in, o_out), (up_in, up_out), (down_in, down_out) = shape.block_linear_shapes
    cast = 0.0
    if config.fp8:
        # FP8 GEMMs at the FP8 peak, reading 1-byte operands; each input is scaled (amax) and cast first:
        # read 2 bytes and write 1 per element (docs/accuracy.md, "FP8").
        inputs = rows * (qkv_in + o_in / tp + up_in + down_in / tp)
        cast = 3.0 * inputs / device.memory_Bps
        device = replace(device, matmul_flops=device.fp8_matmul_flops, element_bytes=1)
    seconds = matmul_seconds(device, rows, qkv_in, qkv_out / tp, k) + matmul_seconds(device, rows, o_in / tp, o_out, k)
    flops = 2.0 * rows * (qkv_in * qkv_out + o_in * o_out) / tp
    if shape.experts:
        seconds += _experts_forward_s(shape, config, device, k, rows)
        flops += 2.0 * rows * shape.experts_per_token * (up_in * up_out + down_in * down_out) / tp
    else:
        seconds += matmul_seconds(device, rows, up_in, up_out / tp, k) + matmul_seconds(
            device, rows, down_in / tp, down_out, k
        )
        flops += 2.0 * rows * (up_in * up_out + down_in * down_out) / tp
    counted = 2.0 * rows * block_params_per_token(shape, config.seq_len) / shape.layers / tp
    return (seconds * counted / flops if flops > 0 else seconds) + cast


def _experts_forward_s(
    shape: ModelShape, config: TrainingConfig, device: Device, k: ThroughputConstants, rows: float
) -> float:
    """The routed experts' matmuls of one block: every rank waits for the busiest one's (planner/expert_routing.py)."""
    tp, ep = config.tensor_parallel, config.expert_parallel
    (up_in, up_out), (down_in, down_out) = shape.block_linear_shapes[2:]
    local_experts = max(shape.experts // ep, 1)
    expert_rows = rows * shape.experts_per_token * ep / shape.experts
    mlp = matmul_seconds(device, expert_rows, up_in, up_out / tp, k) + matmul_seconds(
        device, expert_rows, down_in / tp, down_out, k
    )
    return local_experts * mlp * config.routing.busiest_rank_load(ep)


# PEFT folds the expert adapters into the weights each forward (planner/memory/lora_targets.py) and registers the
# fold as a parametrization, which torch evaluates once more to check it (torch/nn/utils/parametrize.py: no
# `unsafe`); backward computes the two factors' gradients from the rebuilt stack's. In folds of the whole stack:
FOLDS_FORWARD, FOLDS_BACKWARD = 2, 2


def _expert_folds(shape: ModelShape, config: TrainingConfig) -> list[tuple[float, float, float]]:
    """One fold of one block's experts on this rank, as (rows, inner, columns) matmuls: W + BA over each expert,
    gate_up at twice the rank, down at the rank."""
    tp, r = config.tensor_parallel, config.lora_rank
    (up_in, up_out), (down_in, down_out) = shape.block_linear_shapes[2:]
    local_experts = max(shape.experts // config.expert_parallel, 1)
    up_rank = 2 * r if shape.gated_mlp else r
    return [(local_experts * up_in, up_rank, up_out / tp), (local_experts * down_in / tp, r, down_out)]


def peft_expert_flops(shape: ModelShape, config: TrainingConfig, rows: float) -> float:
    """What PEFT's adapted experts add to one block's forward and backward on this rank: the folds, and the experts'
    weight gradient (of the rebuilt stack), which frozen weights would not compute."""
    folds = sum(2.0 * m * inner * n for m, inner, n in _expert_folds(shape, config))
    (up_in, up_out), (down_in, down_out) = shape.block_linear_shapes[2:]
    weight_gradients = 2.0 * rows * shape.experts_per_token * (up_in * up_out + down_in * down_out)
    return (FOLDS_FORWARD + FOLDS_BACKWARD) * folds + weight_gradients / config.tensor_parallel


def _expert_fold_s(shape: ModelShape, config: TrainingConfig, device: Device, k: ThroughputConstants) -> float:
    return sum(matmul_seconds(device, m, inner, n, k) for m, inner, n in _expert_folds(shape, config))


def _attention_forward_s(
    shape: ModelShape, config: TrainingConfig, device: Device, k: ThroughputConstants, fused: bool
) -> float:
    b, s, tp = config.micro_batch, config.seq_len, config.tensor_parallel
    queries = s / config.context_parallel  # context parallelism: this rank's queries against every key
    squares = attention_square_layers(shape, s) / shape.layers  # >1 for decoders with cross-attention
    widths = shape.query_width + (shape.value_width or shape.query_width)  # QK^T and PV
    full_flops = 2.0 * b * queries * s * widths / tp * squares
    if fused and config.attention is AttentionKernel.SDPA:
        causal_share = 0.5 if shape.causal else 1.0  # flash skips fully masked tiles
        return flash_attention_seconds(device, full_flops * causal_share, k)
    heads = b * shape.query_width / shape.head_dim / tp * squares
    products = 2.0 * heads * matmul_seconds(device, queries, shape.head_dim, s, k)
    scores = _score_elements(shape, config) * 2.0  # scores and probabilities written, both queries x s
    return products + elementwise_seconds(device, scores, k)


def _score_elements(shape: ModelShape, config: TrainingConfig) -> float:
    """Elements of one block's materialised s x s scores (all heads of the micro-batch on this rank)."""
    s, tp = config.seq_len, config.tensor_parallel
    squares = attention_square_layers(shape, s) / shape.layers
    heads = config.micro_batch * shape.query_width / shape.head_dim / tp * squares
    return heads * s / config.context_parallel * s


def _block_elements(shape: ModelShape, config: TrainingConfig, rows: float) -> float:
    """Values one block writes outside the matmuls: norms, residuals, rotary, activations."""
    tp = config.tensor_parallel
    hidden_split = tp if config.sequence_parallel else 1
    hidden_part = (shape.norms_per_block + 2) * shape.hidden / hidden_split
    attention_part = (2 * shape.query_width + 2 * shape.kv_width) / tp
    mlp_width = (3 if shape.gated_mlp else 2) * shape.ffn * max(shape.experts_per_token, 1)
    return rows * (hidden_part + attention_part + mlp_width / tp)


def stage_compute(
    shape: ModelShape,
    config: TrainingConfig,
    device: Device,
    k: ThroughputConstants,
    *,
    fused_attention: bool,
    stack: KernelStack = KernelStack.FUSED,
) -> StageCompute:
    rows = float(config.micro_batch * config.seq_len / config.context_parallel)
    tp, pp = config.tensor_parallel, config.pipeline_parallel
    stage_map = config.layout.stage_layers
    # Blocks on each pipeline rank (its chunks together); without a map every rank is costed as the fullest.
    rank_blocks = layers_per_rank(stage_map, pp) if stage_map else (math.ceil(shape.layers / pp),) * pp

    matmul_fwd = _block_matmuls_forward_s(shape, config, device, k, rows)
    attention_fwd = _attention_forward_s(shape, config, device, k, fused_attention)
    flash = fused_attention and config.attention is AttentionKernel.SDPA
    # An unfused softmax chain's extra s x s passes (attention_chain.py), where the scores are materialised.
    chain_fwd, chain_bwd = (
        (0.0, 0.0) if flash else score_chain_seconds(stack, shape, config, _score_elements(shape, config), device, k)
    )
    elementwise_fwd = elementwise_seconds(device, _block_elements(shape, config, rows), k)
    elementwise_fwd += rows * unfused_bytes_per_row(shape, config, stack) / device.memory_Bps
    # An eager activation chain's extra bytes (kernel_stack.py), forward and backward as traced.
    activation_fwd, activation_bwd = (
        rows * extra / device.memory_Bps for extra in activation_bytes_per_row(shape, config, stack)
    )

    if config.lora_rank:
        adapters = sum(
            count
            * (
                matmul_seconds(device, rows, fan_in, config.lora_rank, k)
                + matmul_seconds(device, rows, config.lora_rank, fan_out, k)
            )
            for fan_in, fan_out, count in shape.lora_shapes
        )
        matmul_bwd = matmul_fwd + 2.0 * adapters  # frozen weights: input gradient only
        matmul_fwd += adapters
        if shape.lora_rebuilds_experts:  # peft_expert_flops: the folds, and the rebuilt stack's weight gradient
            fold = _expert_fold_s(shape, config, device, k)
            matmul_fwd += FOLDS_FORWARD * fold
            matmul_bwd += _experts_forward_s(shape, config, device, k, rows) + FOLDS_BACKWARD * fold
    else:
        matmul_bwd = 2.0 * matmul_fwd
    if config.qlora:  # the 4-bit weights (an MoE block's fused experts stay 16-bit)
        dequant = NF4_DEQUANT_BYTES_PER_WEIGHT * shape.qlora_weights_per_block / tp / device.memory_Bps
        matmul_fwd += dequant
        matmul_bwd += dequant
    backward_ratio = k.attention_backward_ratio if flash else 2.0

    launches_fwd = k.kernels_per_block_forward * k.kernel_launch_s
    gpu_fwd = matmul_fwd + attention_fwd + chain_fwd + elementwise_fwd + activation_fwd
    block_fwd = max(gpu_fwd, launches_fwd)
    block_bwd = max(
        matmul_bwd + backward_ratio * attention_fwd + chain_bwd + 2.0 * elementwise_fwd + activation_bwd,
        2.0 * launches_fwd,
    )
    if config.activation_checkpointing is ActivationCheckpointing.FULL:
        block_recompute = block_fwd
    elif config.activation_checkpointing is ActivationCheckpointing.SELECTIVE:
        block_recompute = attention_fwd + chain_fwd
    elif config.activation_checkpointing is ActivationCheckpointing.OP:
        # The skipped matmuls and every element-wise op again; a fused attention kernel's output was kept.
        block_recompute = shape.op_recomputed_matmul_share * matmul_fwd + elementwise_fwd + activation_fwd
        block_recompute += 0.0 if flash else attention_fwd + chain_fwd
    else:
        block_recompute = 0.0
    checkpointing = config.activation_checkpointing
    attention_again = checkpointing is not ActivationCheckpointing.NONE and not (
        checkpointing is ActivationCheckpointing.OP and flash
    )
    recomputed = 1.0 if attention_again else 0.0
    block_attention = (1.0 + backward_ratio + recomputed) * attention_fwd + (1.0 + recomputed) * chain_fwd + chain_bwd
    matmuls_again = {ActivationCheckpointing.FULL: 1.0, ActivationCheckpointing.OP: shape.op_recomputed_matmul_share}
    block_matmuls = matmul_fwd + matmul_bwd + matmuls_again.get(checkpointing, 0.0) * matmul_fwd

    head_fwd = head_bwd = 0.0
    if shape.has_lm_head:
        head_mm = matmul_seconds(device, rows, shape.hidden, shape.vocab / tp, k)
        loss = elementwise_seconds(device, rows * shape.vocab / tp, k, element_bytes=4)  # fp32 logits
        head_fwd = head_mm + loss
        head_bwd = (1.0 if config.lora_rank else 2.0) * head_mm + loss
    # The slowest rank sets the pace: the last one runs the head beside its blocks (a map may give it fewer).
    block_total, head_total = block_fwd + block_bwd + block_recompute, head_fwd + head_bwd
    rank_seconds = [count * block_total for count in rank_blocks[:-1]] + [rank_blocks[-1] * block_total + head_total]
    busiest = rank_seconds.index(max(rank_seconds))
    blocks, head = rank_blocks[busiest], busiest == pp - 1
    return StageCompute(
        forward_s=blocks * block_fwd + head_fwd * head,
        backward_s=blocks * block_bwd + head_bwd * head,
        recompute_s=blocks * block_recompute,
        blocks=blocks,
        attention_s=blocks * block_attention,
        matmul_s=blocks * block_matmuls,
        launch_bound=gpu_fwd < launches_fwd,
    )
