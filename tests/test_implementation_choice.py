"""`--implementation`: predict the speed of another codebase's run (planner/throughput/implementation.py).

Reference: the published-runs validator (benchmarks/accuracy/validate_published_runs.py),
which estimates each published run with its codebase's preset. The path
`estimate --implementation` takes gives the validator's number for a
Megatron-LM row of Narayanan et al. Table 1, within the validator's own
accuracy of the published figure; our stack's prediction is slower on a
Llama (transformers' eager RMSNorm and rotary), and the estimate names the
preset it assumed.
"""

from __future__ import annotations

import json

import pytest

from benchmarks.accuracy.validate_published_runs import compare, plan_inputs, published_rows
from hardware_selector_cli.app import main
from planner.evaluate import evaluate
from planner.training_config import ActivationCheckpointing


def test_the_cli_path_reproduces_the_validators_megatron_row():
    row = next(row for row in published_rows() if row["id"] == "megatron-2021-7.5b")
    spec, config, cluster = plan_inputs(row)
    megatron = evaluate(spec, config, cluster, implementation="megatron").throughput
    ours = evaluate(spec, config, cluster).throughput
    assert megatron is not None and ours is not None
    validated = compare(row)
    peak = megatron.tflops_per_gpu / megatron.mfu
    assert megatron.hfu * peak == pytest.approx(validated.predicted_tflops, rel=1e-9)
    assert validated.predicted_tflops == pytest.approx(
        validated.published_tflops, rel=0.15
    )  # 142 TFLOP/s per GPU published
    # A GPT (LayerNorm, learned positions, no pipeline): the two differ by their attention chains alone
    # (planner/throughput/attention_chain.py): Megatron-LM's dropout after its fused softmax, one s x s write more a
    # forward (twice under full recomputation) and one a backward; transformers' eager chain with 16-bit weights (our
    # engine runs the module in 16 bits, no autocast: kernel_stack.chain_precision) and attention dropout (GPT-2's
    # 0.1), three more forward and two backward; and transformers' gelu_new chain where Megatron-LM runs one bias-GeLU
    # kernel (kernel_stack.py: its traced bytes at the HBM rate, forward twice).
    from planner.models.flops import model_shape
    from planner.throughput.constants import CONSTANTS
    from planner.throughput.estimate import hardware_of
    from planner.throughput.kernel_stack import KernelStack, activation_bytes_per_row
    from planner.throughput.kernels import elementwise_seconds

    device = hardware_of(cluster, config)[0]
    scores = row["micro_batch"] * row["heads"] / row["tp"] * row["seq_len"] ** 2
    per_block = elementwise_seconds(device, ((2 * 1 + 1) - (2 * 3 + 2)) * scores, CONSTANTS)
    act_forward, act_backward = activation_bytes_per_row(model_shape(spec), config, KernelStack.HF_EAGER)
    assert act_forward > 0
    per_block -= row["micro_batch"] * row["seq_len"] * (2 * act_forward + act_backward) / device.memory_Bps
    assert megatron.breakdown.compute_s + megatron.breakdown.recompute_s - (
        ours.breakdown.compute_s + ours.breakdown.recompute_s
    ) == pytest.approx(config.grad_accum * row["layers"] * per_block, rel=1e-9)  # per step: its micro-batches
    assert "Megatron-LM" in megatron.sources["implementation"] and "this project" in ours.sources["implementation"]


def test_another_codebase_moves_the_speed_and_says_the_memory_is_counted_for_ours():
    """--implementation changes the throughput estimate and, of the memory, what the stack decides (its cross-entropy
    kernel, its checkpoints' and gathered stages' place: tests/test_loss_kernels.py, tests/test_stack_memory.py): the
    blocks are counted as transformers' modules (traced), which another stack
    may keep fewer of (docs/accuracy.md, "Every published run, the same way"), and it says so in its notes and the
    implementation source; the default preset says nothing of it. Here the first of 8 pipeline stages, which holds
    no loss, is the most loaded: the same total under Megatron-DeepSpeed's preset. Megatron-Core's counts its
    Transformer Engine blocks instead (tests/test_te_blocks.py), fewer bytes, and names them."""
    row = next(row for row in published_rows() if row["id"] == "megatron-bridge-llama3-70b-64-h100-fp8")
    spec, config, cluster = plan_inputs(row)
    preset = "megatron-deepspeed"
    ours, theirs = evaluate(spec, config, cluster), evaluate(spec, config, cluster, implementation=preset)
    assert theirs.memory.total == ours.memory.total
    assert not any("--implementation" in note for note in ours.memory.notes)
    said = f"--implementation {preset}: memory counted for transformers' modules, with this stack's cross-entropy"
    assert f"{said} (megatron) and where it keeps" in " ".join(theirs.memory.notes)
    assert theirs.throughput is not None and ours.throughput is not None
    assert "may keep fewer" in theirs.throughput.sources["implementation"]
    assert "may keep fewer" not in ours.throughput.sources["implementation"]
    core = evaluate(spec, config, cluster, implementation="megatron-core")
    assert core.memory.total < 0.8 * ours.memory.total
    said = "--implementation megatron-core: memory counted for Megatron-Core's Transformer Engine blocks"
    assert said in " ".join(core.memory.notes)
    assert core.throughput is not None
    assert "planner/memory/te_blocks.py" in core.throughput.sources["implementation"]


def test_torchtitans_selective_names_its_op_level_default():
    """torchtitan calls its op-level policy "selective" (the default selective_ac_option 'op'): estimating it as our
    selective (Korthikanti's) says which --ac counts torchtitan's, and --ac op itself needs no such word."""
    row = next(row for row in published_rows() if row["id"] == "torchtitan-llama3-8b-fsdp-eager")
    spec, config, cluster = plan_inputs(row)  # planned with --ac op, as the run checkpointed
    selective = config.model_copy(update={"activation_checkpointing": ActivationCheckpointing.SELECTIVE})
    named = " ".join(evaluate(spec, selective, cluster, implementation="torchtitan").memory.notes)
    assert "op-level by default (selective_ac_option = 'op'), which --ac op counts" in named
    for quiet in (evaluate(spec, config, cluster, implementation="torchtitan"), evaluate(spec, selective, cluster)):
        assert "selective_ac_option" not in " ".join(quiet.memory.notes)


def test_plan_and_estimate_take_the_flag_and_refuse_what_cannot_apply(capsys, tmp_path):
    base = ["--model", "llama-2-7b", "--gpu", "A100-80GB", "--gpus-per-node", "8", "--seq-len", "4096", "--json"]
    assert main(["plan", *base, "--implementation", "llm-foundry"]) == 0
    best = json.loads(capsys.readouterr().out)["best"]
    assert best["throughput"]["sources"]["implementation"].startswith("assumed: llm-foundry")
    assert main(["plan", *base]) == 0
    ours = json.loads(capsys.readouterr().out)["best"]
    # Llama's RMSNorm and rotary: fused in llm-foundry, eager op chains in transformers' modules.
    assert best["throughput"]["mfu"] > ours["throughput"]["mfu"]
    # The search counts the codebase's memory too: llm-foundry's fused loss (planner/memory/stack_memory.py).
    assert "fused cross-entropy kernel" in best["memory"]["sources"]["temporaries"]
    assert "fp32 log-softmax" in ours["memory"]["sources"]["temporaries"]
    assert main(["plan", *base, "--implementation", "tpu"]) == 2
    assert "--implementation must be one of ours, llm-foundry" in capsys.readouterr().err
    assert main(["plan", *base, "--implementation", "megatron", "--emit", str(tmp_path / "x")]) == 2
    assert "--emit writes configs for our stacks" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_a_ring_hides_the_context_exchange_under_the_attention_and_an_all_gather_does_not():
    """Megatron-LM passes keys and values round the cp ranks under the attention of the chunk before; our engine
    (and Meta's Llama 3 stack) all-gathers them first. The same bytes move either way (the exchange's time is
    the same); the ring exposes only what exceeds the blocks' attention: none of it at 64k tokens inside a node,
    the excess at 16k tokens over cp 64 across 8 nodes, where the attention of a 256-token chunk is short."""
    import dataclasses

    from planner.hardware.cluster import make_cluster
    from planner.models.resolve import resolve_model
    from planner.throughput.estimate import estimate_throughput
    from planner.throughput.implementation import MEGATRON_LM
    from planner.training_config import TrainingConfig

    spec = resolve_model("llama-3.1-8b")
    gathered = dataclasses.replace(MEGATRON_LM, overlaps_context_exchange=False)
    for seq_len, cp, nodes in ((65536, 8, 1), (16384, 64, 8)):
        config = TrainingConfig(strategy="engine", layout={"cp": cp}, seq_len=seq_len, activation_checkpointing="full")
        cluster = make_cluster("H100-80GB", 8, nodes, interconnect="ib-ndr" if nodes > 1 else None)
        ring = estimate_throughput(spec, config, cluster, implementation=MEGATRON_LM).breakdown
        gather = estimate_throughput(spec, config, cluster, implementation=gathered).breakdown
        exchange = ring.tensor_parallel_comm_s  # tp 1: the context exchange alone
        assert exchange == gather.tensor_parallel_comm_s > 0
        hidden = gather.exposed_comm_s - ring.exposed_comm_s
        if nodes == 1:
            assert hidden == pytest.approx(exchange)
        else:
            assert 0 < hidden < exchange


def test_overlapped_tensor_parallel_collectives_wait_only_for_what_the_matmuls_cannot_cover():
    """Megatron-Core's userbuffers split each TP all-gather and reduce-scatter into the GEMM beside it
    (`tp_comm_overlap`, read in Megatron-Bridge's Llama 3 recipes; benchmarks/data/published_stack_runs.yaml): the
    same bytes move, and the step waits for none of them while the blocks' matmuls take longer (Llama 3 8B at TP 8
    in a node), and for the excess where they do not (a 1-layer-wide slice: TP 8 across nodes, tiny matmuls)."""
    import dataclasses

    from planner.hardware.cluster import make_cluster
    from planner.models.resolve import resolve_model
    from planner.throughput.estimate import estimate_throughput
    from planner.throughput.implementation import MEGATRON_LM
    from planner.training_config import TrainingConfig

    overlapped = dataclasses.replace(MEGATRON_LM, overlaps_tensor_parallel_comm=True)
    spec = resolve_model("llama-3.1-8b")
    for gpus_per_node, nodes, hidden_in_full in ((8, 1, True), (1, 8, False)):
        config = TrainingConfig(strategy="engine", layout={"tp": 8}, seq_len=4096, sequence_parallel=True)
        cluster = make_cluster("H100-80GB", gpus_per_node, nodes, interconnect="ib-hdr" if nodes > 1 else None)
        exposed = estimate_throughput(spec, config, cluster, implementation=MEGATRON_LM).breakdown
        hidden = estimate_throughput(spec, config, cluster, implementation=overlapped).breakdown
        traffic = exposed.tensor_parallel_comm_s
        assert traffic == hidden.tensor_parallel_comm_s > 0
        saved = exposed.exposed_comm_s - hidden.exposed_comm_s
        if hidden_in_full:
            assert saved == pytest.approx(traffic)
        else:
            assert 0 < saved < traffic


def test_a_hopper_native_attention_kernel_runs_the_attention_faster_on_hopper_only():
    """Transformer Engine's attention on H100 (cuDNN's fused kernel or FlashAttention-3) against the
    FlashAttention-2 rate the Hopper factor holds: the blocks' attention takes 1/1.5 of the time
    (HOPPER_NATIVE_ATTENTION_SPEEDUP, the FlashAttention-3 paper's lower end), nothing else moves, and an A100
    (no Hopper kernel) is untouched."""
    import dataclasses

    from planner.hardware.cluster import make_cluster
    from planner.hardware.gpus import find_gpu
    from planner.memory.loss_kernels import LossKernel
    from planner.memory.stack_memory import StackMemory
    from planner.models.resolve import resolve_model
    from planner.throughput.estimate import throughput_plan
    from planner.throughput.implementation import (
        HOPPER_NATIVE_ATTENTION_SPEEDUP,
        MEGATRON_CORE,
        MEGATRON_LM,
        implementation_named,
    )
    from planner.throughput.library_efficiency import library_efficiency
    from planner.training_config import TrainingConfig

    native = dataclasses.replace(MEGATRON_LM, hopper_native_attention=True)
    # --implementation megatron-core is Megatron-LM's mechanisms with both of Transformer Engine's switches.
    assert implementation_named("megatron-core") is MEGATRON_CORE
    te_memory = StackMemory(
        LossKernel.MEGATRON,
        gelu_keeps_input=True,
        gradient_buffer=True,
        shards_dense_over_data_parallel=True,
        fp8_weights=True,
        te_blocks=True,
    )
    assert MEGATRON_CORE == dataclasses.replace(
        native, name=MEGATRON_CORE.name, overlaps_tensor_parallel_comm=True, memory=te_memory
    )
    spec = resolve_model("llama-3.1-8b")
    config = TrainingConfig(strategy="engine", seq_len=8192)
    growth = library_efficiency(find_gpu("H100-80GB")).native_growth_at(8192)  # cuDNN's, 4k -> 8k (attention_curves)
    assert growth == pytest.approx(566.9 / 502.4, rel=1e-3)
    for gpu, speedup in (("H100-80GB", HOPPER_NATIVE_ATTENTION_SPEEDUP * growth), ("A100-80GB", 1.0)):
        cluster = make_cluster(gpu, 8, 1)
        fa2 = throughput_plan(spec, config, cluster, implementation=MEGATRON_LM).device
        hopper = throughput_plan(spec, config, cluster, implementation=native).device
        assert hopper.attention_flops == pytest.approx(fa2.attention_flops * speedup)
        assert dataclasses.replace(hopper, attention_flops=fa2.attention_flops) == fa2


def test_plan_searches_only_what_the_named_codebase_trains_with():
    """plan --implementation megatron --strategies ddp planned DDP as if Megatron-LM ran it (a new user's audit);
    estimate already refused the pair. Without --strategies the search keeps to the codebase's own strategies."""
    from tests.distributed import cli_in_process

    refused = cli_in_process("plan", "-m", "gpt2", "--gpu", "A100-80GB", "--implementation", "megatron",
                             "--strategies", "ddp")  # fmt: skip
    assert refused.returncode == 2 and "trains with --strategy engine, not DDP" in refused.stderr
    kept = cli_in_process("plan", "-m", "gpt2", "--gpu", "A100-80GB", "--implementation", "megatron", "--json")
    assert kept.returncode == 0, kept.stderr
    import json

    document = json.loads(kept.stdout)
    strategies = {plan["config"]["strategy"] for plan in document["candidates"]}
    assert strategies == {"engine"}, strategies


def test_the_2019_megatron_preset_charges_the_traced_softmax_chain(capsys):
    """megatron-2019, the code the ZeRO papers ran (planner/throughput/attention_chain.py): the validator's ZeRO-2 row
    through the path `estimate --implementation` takes, slower than DeepSpeed's 2021 preset by the chain's traced
    passes alone (4 s x s writes more a forward, 3 a backward, the forward again under checkpointing), and the flag
    works from the CLI, where the estimate names the preset."""
    from benchmarks.accuracy.validate_published_runs import zero_paper_rows
    from planner.throughput.attention_chain import EXTRA_SCORE_WRITES
    from planner.throughput.kernel_stack import KernelStack
    from planner.throughput.kernels import elementwise_seconds

    row = next(row for row in zero_paper_rows() if row["id"] == "zero-paper-zero2-dp-1.5b-128-v100")
    assert row["implementation"] == "megatron-2019"
    spec, config, cluster = plan_inputs(row)
    chain = evaluate(spec, config, cluster, implementation="megatron-2019").throughput
    fused = evaluate(spec, config, cluster, implementation="deepspeed").throughput
    assert chain is not None and fused is not None
    tokens_per_gpu = chain.tokens_per_s / chain.world_size
    assert 8.0 * spec.params.total * tokens_per_gpu / 1e12 == pytest.approx(compare(row).predicted_tflops, rel=1e-9)
    # The extra time is the traced writes at the element-wise rate: forward, recomputed forward, backward.
    forward, backward = EXTRA_SCORE_WRITES[KernelStack.MEGATRON_2019]
    assert (forward, backward) == (4, 3)
    from planner.throughput.estimate import hardware_of

    device = hardware_of(cluster, config)[0]
    from planner.throughput.constants import CONSTANTS

    heads, s = row["heads"], row["seq_len"]
    per_block = elementwise_seconds(device, (2 * forward + backward) * row["micro_batch"] * heads * s * s, CONSTANTS)
    assert chain.breakdown.compute_s + chain.breakdown.recompute_s - (
        fused.breakdown.compute_s + fused.breakdown.recompute_s
    ) == pytest.approx(row["layers"] * per_block, rel=1e-9)
    assert "September 2019" in chain.sources["implementation"]
    base = ["estimate", "--model", "gpt2-xl", "--gpu", "V100-32GB", "--strategy", "zero2", "--seq-len", "1024",
            "--micro-batch", "8", "--attention", "eager", "--precision", "fp16-mixed", "--json"]  # fmt: skip
    assert main([*base, "--implementation", "megatron-2019"]) == 0
    estimate = json.loads(capsys.readouterr().out)
    assert "Megatron-LM of September 2019" in json.dumps(estimate)


def test_our_stack_charges_transformers_eager_attention_chain_by_precision():
    """Where our stack's attention is not fused (`attention="eager"`), transformers' eager_attention_forward runs:
    the s x s writes it adds beyond the fused reference, traced per precision (planner/throughput/attention_chain.py,
    benchmarks/accuracy/transformers_attention_traffic.py), are charged at the element-wise rate in the forward and
    the backward; Llama (fp32 softmax, no attention dropout): 5 and 5 under autocast (DDP's mixed precision), 6 and 5
    with 16-bit weights (pure bf16, and FSDP's and DeepSpeed's mixed precisions, which run the module in 16 bits: the
    MLP chain's rule, kernel_stack.chain_precision), 2 and 1 in fp32; Gemma-2's soft-capping 3 more each way. SDPA's
    flash kernel runs none of it."""
    from planner.hardware.cluster import make_cluster
    from planner.models.flops import model_shape
    from planner.models.resolve import resolve_model
    from planner.throughput.compute import stage_compute
    from planner.throughput.constants import CONSTANTS
    from planner.throughput.estimate import hardware_of
    from planner.throughput.kernel_stack import KernelStack
    from planner.throughput.kernels import elementwise_seconds
    from planner.training_config import TrainingConfig

    spec = resolve_model("llama-3.1-8b")
    shape = model_shape(spec)
    assert shape.softmax_fp32 and not shape.attention_dropout
    cluster = make_cluster("H100-80GB", 8, 1)
    for strategy, precision, (forward, backward) in (
        ("ddp", "bf16-mixed", (5, 5)),
        ("fsdp", "bf16-mixed", (6, 5)),
        ("deepspeed", "fp16-mixed", (6, 5)),
        ("fsdp", "bf16", (6, 5)),
        ("fsdp", "fp32", (2, 1)),
    ):
        for attention, charged in (("eager", True), ("sdpa", False)):
            config = TrainingConfig(
                strategy=strategy, seq_len=2048, micro_batch=1, precision=precision, attention=attention
            )
            device = hardware_of(cluster, config)[0]
            ours, fused = (
                stage_compute(shape, config, device, CONSTANTS, fused_attention=True, stack=stack)
                for stack in (KernelStack.HF_EAGER, KernelStack.FUSED)
            )
            scores = spec.num_heads * config.seq_len**2
            expected = shape.layers * elementwise_seconds(device, (forward + backward) * scores, CONSTANTS)
            assert ours.attention_s - fused.attention_s == pytest.approx(expected if charged else 0.0, rel=1e-9)
    from planner.throughput.attention_chain import extra_score_writes

    gemma = model_shape(resolve_model("gemma-2-2b"))
    assert gemma.score_softcapping and gemma.softmax_fp32
    for strategy, precision, writes in (
        ("ddp", "bf16-mixed", (8, 8)),
        ("fsdp", "bf16-mixed", (9, 8)),
        ("fsdp", "bf16", (9, 8)),
        ("fsdp", "fp32", (5, 4)),
    ):
        config = TrainingConfig(strategy=strategy, seq_len=2048, precision=precision, attention="eager")
        assert extra_score_writes(KernelStack.HF_EAGER, gemma, config) == writes


def test_our_stack_charges_transformers_eager_activation_chain_by_activation_and_precision():
    """transformers' gelu_new (GPT-2) is a chain of element-wise ops over the b x s x ffn activation where a fused
    stack runs one kernel: the extra bytes traced per element (planner/throughput/kernel_stack.py,
    benchmarks/accuracy/transformers_activation_traffic.py) are charged at the HBM rate, forward and backward as traced:
    72 and 112 under DDP's autocast (pow in fp32), 32 and 50 where the weights are cast to 16 bits (FSDP, DeepSpeed,
    our engine), 64 and 100 in fp32. The forward again under full checkpointing; nothing on the fused stack, nor for
    a one-kernel activation (Llama's silu)."""
    from planner.hardware.cluster import make_cluster
    from planner.models.flops import model_shape
    from planner.models.resolve import resolve_model
    from planner.throughput.compute import stage_compute
    from planner.throughput.constants import CONSTANTS
    from planner.throughput.estimate import hardware_of
    from planner.throughput.kernel_stack import KernelStack, activation_bytes_per_row
    from planner.training_config import TrainingConfig

    gpt2 = model_shape(resolve_model("gpt2-xl"))
    assert gpt2.activation == "gelu_new" and not gpt2.gated_mlp
    cluster = make_cluster("A100-80GB", 8, 1)
    cases = (("ddp", "bf16-mixed", (72, 112)), ("fsdp", "bf16-mixed", (32, 50)), ("deepspeed", "fp16-mixed", (32, 50)),
             ("ddp", "bf16", (32, 50)), ("ddp", "fp32", (64, 100)))  # fmt: skip
    for strategy, precision, (forward, backward) in cases:
        for checkpointing, forwards in (("none", 1), ("full", 2)):
            config = TrainingConfig(strategy=strategy, seq_len=1024, micro_batch=2, precision=precision,
                                    activation_checkpointing=checkpointing)  # fmt: skip
            device = hardware_of(cluster, config)[0]
            ours, fused = (
                stage_compute(gpt2, config, device, CONSTANTS, fused_attention=True, stack=stack)
                for stack in (KernelStack.HF_EAGER, KernelStack.FUSED)
            )
            elements = config.micro_batch * config.seq_len * gpt2.ffn
            expected = gpt2.layers * elements * (forwards * forward + backward) / device.memory_Bps
            assert ours.total_s - fused.total_s == pytest.approx(expected, rel=1e-9), (strategy, precision)
    llama = model_shape(resolve_model("llama-3.1-8b"))
    config = TrainingConfig(strategy="ddp", seq_len=1024, precision="bf16-mixed")
    assert llama.activation == "silu"
    assert activation_bytes_per_row(llama, config, KernelStack.HF_EAGER) == (0.0, 0.0)
    assert activation_bytes_per_row(gpt2, config, KernelStack.FUSED) == (0.0, 0.0)
    tp2 = TrainingConfig(strategy="engine", seq_len=1024, precision="bf16-mixed", layout={"tp": 2})
    assert tp2.tensor_parallel == 2
    assert activation_bytes_per_row(gpt2, tp2, KernelStack.HF_EAGER) == (32 * gpt2.ffn / 2, 50 * gpt2.ffn / 2)
