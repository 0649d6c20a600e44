"""How the training code behind a run behaves, where implementations differ enough to matter.

The throughput model's mechanisms are the same for every run; these switches
say which variant of them a codebase uses. Each preset is an explicit,
documented assumption, never a factor fitted to single runs; the one measured
term (measured_shortfall, below) is fitted on twelve runs of its codebase and
checked on fourteen others, and says so wherever it moves an estimate:

- kernels: fused norms and rotary, or transformers' eager op chains (kernel_stack.py); the Megatron-LM
  code of September 2019 (megatron-2019), which the ZeRO and ZeRO-Offload papers ran, has fused norms but
  an unfused attention softmax, whose extra s x s passes were traced (attention_chain.py); Megatron-DeepSpeed
  (megatron-deepspeed) fuses the softmax but runs attention dropout after it (p = 0.1 by default), one more
  s x s pass each way (attention_chain.py), and so does Megatron-LM's own code of 2021-2022 (megatron).
- p2p_scatter_gather: Megatron-LM splits each pipeline stage-boundary tensor
  over the TP ranks' NICs and re-gathers it over NVLink (Narayanan et al. 2021,
  section 4.1); so does DeepSpeed's pipeline engine, activations and their
  gradients alike (PartitionedTensor under `is_pipe_partitioned` and
  `is_grad_partitioned` in deepspeed/runtime/pipe/engine.py: read in 0.5.4, the
  October 2021 release of MT-NLG's time, and in 0.19.8, where the ds_config's
  `pipeline.pipe_partitioned`/`grad_partitioned` default to true;
  tests/test_deepspeed_pipeline.py). torch.distributed.pipelining (our engine)
  sends the whole tensor from every TP rank.
- serial_pipeline_transfers: DeepSpeed's pipeline engine runs each
  stage-boundary transfer as a blocking send or receive of its own
  (deepspeed/runtime/pipe/p2p.py lines 48-86 at v0.5.4, MT-NLG's time, and at
  89e37ef3, BLOOM's: dist.send/dist.recv, `assert async_op == False`), in the
  order TrainSchedule gives a step (schedule.py lines 207-219 at v0.5.4:
  RecvActivation then SendGrad before a forward, SendActivation then RecvGrad
  before a backward), so a middle stage waits out four transfers a
  micro-batch where Megatron-LM pairs a send with a receive in one
  batch_isend_irecv (megatron/schedules.py lines 413 and 436,
  p2p_communication.py line 108 at e270f68a): two. Running the schedule with
  timed transfers puts 4m + 2p - 8 of them on the critical path
  (communication.deepspeed_critical_transfers; tests/test_deepspeed_pipeline.py)
  against the 2m charged otherwise. On in megatron-deepspeed.
- reduces_gradients_after_flush: the pipeline engine turns the backward's
  gradient all-reduce off ("We schedule the all-reduces, so disable it in
  super().backward()": `enable_backward_allreduce = False`, pipe/engine.py line
  59 at v0.5.4, line 75 at 89e37ef3) and reduces the data-parallel gradients
  in the ReduceGrads instruction after the schedule's last backward
  (schedule.py line 236 at 89e37ef3; ZeRO-1's reduce_gradients(pipeline_parallel=True),
  zero/stage2.py line 564 at v0.5.4), so none of it runs under the backward.
  Applies when pp > 1 (the PipelineEngine) and ZeRO is 0 or 1 (the engine
  refuses 2 and 3). On in megatron-deepspeed.
- all_reduces_fp32_gradients: DeepSpeed's BF16Optimizer (bf16 with ZeRO stage
  0 in the ds_config, which BLOOM trained with: "bf16 must use z0! it
  implements its own zero stage 1 equivalent") keeps the whole local gradient
  in fp32 and the pipeline engine all-reduces it over the data-parallel ranks
  (pipe/engine.py lines 259-274, `_bf16_reduce_grads`, and bf16_optimizer.py
  line 408, `get_grads_for_reduction`, at 89e37ef3) before each rank steps its
  partition and all-gathers the bf16 weights (line 365): a 4-byte all-reduce
  where ZeRO-1 reduce-scatters 16-bit gradients. Set per row
  (`bf16_optimizer` in benchmarks/data/published_runs.yaml); no preset.
- sharded_gather_per_gpu_nic: whether a ZeRO-3 / FSDP parameter all-gather and
  gradient reduce-scatter spanning nodes reaches the node's combined NIC
  bandwidth (NCCL's rings pass each chunk into a node once, then over NVLink:
  how llm-foundry's FSDP runs behave, calibration) or only each GPU's own NIC.
  The second is INFERRED from Narayanan et al. Table 2, where DeepSpeed ZeRO-3
  (2021) on 384-2240 A100s ran at the speed that per-GPU-NIC bound predicts
  (benchmarks/data/published_runs.yaml), not read from DeepSpeed's code.
- transformers_attention: attention runs as transformers' module does, so a
  family whose module cannot reach SDPA's fused kernel (DeepSeek's 192/128 head
  widths, Gemma-2's soft-capping, BLOOM's ALiBi) keeps its scores; the other
  codebases bring their own fused kernels, and the run's attention choice
  alone decides.
- DeepSeek-V3's DualPipe (DeepSeek-V3 Technical Report, section 3.2.1): each
  micro-batch's expert all-to-all runs while another chunk computes, so only
  what exceeds the stage's compute is exposed
  (overlaps_expert_all_to_all); and micro-batches enter the pipeline from both
  ends, which the report's Table 2 puts at (pp/2 - 1) stage-steps of bubble
  against 1F1B's (pp - 1) (bidirectional_pipeline; its weight-gradient
  refinement, -3W, is left out, so the bubble is an upper bound). DualPipe
  keeps two copies of the parameters, which the memory estimate does not add.
- overlaps_context_exchange: under context parallelism, whether the keys and
  values go round the cp ranks in a ring, each chunk's transfer under the
  attention of the chunk before, so only what exceeds the attention's compute
  is exposed (Megatron-LM's default point-to-point context parallelism), or are
  all-gathered before the attention runs (this project's engine,
  backends/context_parallel; torchtitan's default all-gather rotation; Meta's
  Llama 3 stack, whose published rows say so in benchmarks/data/published_runs.yaml).
- overlaps_tensor_parallel_comm: whether the tensor-parallel all-gathers and
  reduce-scatters run under the linear layers beside them, each split into the
  GEMM's chunks (Transformer Engine's userbuffers comm-GEMM overlap, which
  Megatron-Core turns on with `tp_comm_overlap`: Megatron-Bridge's Llama 3
  recipes do), so only what exceeds the blocks' matmul time is exposed. On in
  megatron-core; off in megatron (Megatron-LM's own 2019-2022 runs did not
  have it) and the other presets.
- hopper_native_attention: on a Hopper GPU, whether attention runs a
  Hopper-native kernel (cuDNN's, FlashAttention-3) or FlashAttention-2, which
  reaches "only 35% utilization on the H100 GPU" (FlashAttention-3 paper, Shah
  et al. 2024, arXiv:2407.08608, abstract): library_efficiency.py's Hopper
  attention factor. Transformer Engine, which Megatron-Core runs, "prefers
  cuDNN flash attention on Hopper+ architectures" (NeMo's memory-optimizations
  docs, NVIDIA/NeMo PR #9188); torch's SDPA, which our backends run, puts cuDNN
  first on sm90 and sm100 when the runtime cuDNN is newer than 9.15
  (`check_prefer_cudnn_attention`, aten/src/ATen/native/transformers/cuda/
  sdp_utils.cpp, read in a stored copy at pytorch 001f694a; torch 2.13's CUDA 13
  wheels take nvidia-cudnn-cu13, 9.24 in this machine's index), where earlier
  versions ran FlashAttention-2 first. The FlashAttention-3 paper puts
  FlashAttention-3 at "1.5-2.0x" FlashAttention-2 on H100; cuDNN 9.19 on an
  H200 at 4k tokens, causal, measures 502 TFLOP/s forward + backward
  (NVIDIA/cudnn-frontend benchmark/sdpa_benchmark_training/results/
  h200_919_only_cudnn at df73764a), 1.49x FlashAttention-2's factor.
  HOPPER_NATIVE_ATTENTION_SPEEDUP, 1.5, is taken at 4k and grows with the
  length as that CSV's cuDNN rate does (x1.80 at 16k: attention_curves.py,
  Implementation.attention_kernel; docs/accuracy.md, "GPU library
  efficiency"). On in ours,
  torchtitan and megatron-core; a published row whose code ran FlashAttention-2
  says so (`attention_kernel: flash-attention-2`, which sets runs_flash_attention_2).
- runs_flash_attention_2: the codebase's attention runs FlashAttention-2 whatever
  the preset's kernel (a published row whose code pinned it: torch's SDPA before
  cuDNN went first, or `sdpa_kernel(FLASH_ATTENTION)`): on Hopper
  FlashAttention-2's factor, on Blackwell FlashAttention-2's measured curve (a
  third of cuDNN's; attention_curves.py); where no FlashAttention-2 is measured
  apart (CDNA, Volta, Turing) the factor's own kernel and curve.
- native_attention_under_cp: whether the stack's context parallelism keeps the
  kernel its attention runs otherwise. Ours does not: its chunks attend with
  torch's lower-right causal bias, which calls FlashAttention-2 directly
  (Implementation.attention_kernel); torch's ring attention (torchtitan's) has
  cuDNN handlers.
- expert_tokens_split_over_tp: under expert and tensor parallelism, whether each
  tp rank sends only its share of the routed tokens to the other ep ranks
  (Megatron-LM's expert tensor parallelism over sequence shards) or every tp
  rank routes and exchanges all of them (this project's engine: the tp ranks of
  a replica route the same tokens, each exchanging them with the ep ranks at its
  own tp coordinate; backends/expert_parallel/dispatch.py).
- memory.checkpoints_to_cpu (one value, StackMemory's: the memory estimate keeps them in CPU memory, this
  module charges the copies' time): under full activation checkpointing, how many activation
  checkpoints per transformer block DeepSpeed's cpu_checkpointing
  (`--checkpoint-in-cpu`) copies to CPU memory in the forward and back before
  the recomputation, on the compute stream (0: they stay on the GPU). The
  ZeRO-Infinity paper's released example (DeepSpeedExamples'
  Megatron-LM-v1.1.5-ZeRO3/examples/ds_pretrain_gpt2-zero3.sh at bdf8e59a,
  "ZeRO-Infinity examples", 2021-04-18) sets PA_CPU=true and
  `--split-transformers` (each block checkpointed as two parts: 2); the copy
  runs at the cluster's host bandwidth (ClusterSpec.host_GBps_per_gpu, the
  paper's about 3 GB/s per GPU on a DGX-2). Set per row
  (`checkpoints_to_cpu` in benchmarks/data/published_zero_papers.yaml); no
  preset of ours runs it (our ds_config refuses cpu_checkpointing).
- memory: what the codebase decides of memory alone (planner/memory/stack_memory.py). Its cross-entropy kernel,
  which decides what the loss holds of the logits (loss_kernels.py), and whether --kernels compile compiles it:
  torch's eager one in ours (transformers' loss), compiled with the blocks under --kernels compile by our runner
  (backends/parts/kernels.py) and by the Trainer's `torch_compile`, flash-attn's fused
  CrossEntropyLoss in llm-foundry (its default `loss_fn: fused_crossentropy`,
  llmfoundry/models/mpt/modeling_mpt.py at b2a43a14, and in the April 2023 code at 9fa3ceb9a,
  examples/llm/src/models/mosaic_gpt/mosaic_gpt.py), Megatron-LM's
  vocab-parallel one in Megatron-LM, Megatron-Core and Megatron-DeepSpeed; torchtitan compiles its loss under
  --compile (`build_cross_entropy_loss`, torchtitan/components/loss.py at e7c0cae, since bbb1b616e of
  2025-04-02; at 9dec370, the version of its December 2024 tables, the line was commented out), which fuses it.
  Under pipelining torchtitan's FSDP keeps each stage gathered and its gradients unreduced until the step's last
  backward; Megatron-Core's blocks are Transformer Engine's and its distributed optimizer shards dense and expert
  states apart (stack_memory.py, where each is read).
- measured_shortfall: a cost the codebase's published runs measure and no
  mechanism read accounts for, calibrated on some of those runs and checked on
  the others (measured_shortfall.py): on in megatron-deepspeed-2022, the code
  MT-NLG and BigScience ran; off in megatron-deepspeed, DeepSpeed's 2023 code.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from planner.contract.choices import AttentionKernel, Strategy
from planner.hardware.gpus import GpuSpec
from planner.memory.loss_kernels import LossKernel
from planner.memory.stack_memory import OURS, StackMemory
from planner.throughput.kernel_stack import KernelStack
from planner.throughput.library_efficiency import library_efficiency
from planner.throughput.measured_shortfall import MEGATRON_DEEPSPEED_2022_SHORTFALL, MeasuredShortfall
from planner.training_config import TrainingConfig

ALL_STRATEGIES = tuple(Strategy)
# The lower end of FlashAttention-3's "1.5-2.0x" over FlashAttention-2 on H100, and cuDNN's measured 1.49x at 4k
# tokens (hopper_native_attention above).
HOPPER_NATIVE_ATTENTION_SPEEDUP = 1.5


@dataclass(frozen=True)
class Implementation:
    name: str
    kernels: KernelStack
    p2p_scatter_gather: bool
    sharded_gather_per_gpu_nic: bool
    transformers_attention: bool = False
    overlaps_expert_all_to_all: bool = False
    bidirectional_pipeline: bool = False
    expert_tokens_split_over_tp: bool = True
    overlaps_context_exchange: bool = False
    overlaps_tensor_parallel_comm: bool = False
    hopper_native_attention: bool = False
    runs_flash_attention_2: bool = False  # a published row's code pinned FlashAttention-2 (attention_kernel)
    native_attention_under_cp: bool = True  # ours: no (its chunks' lower-right causal bias calls FA2: attention_kernel)
    dispatch_host_wait_s: float = 0.0  # a MoE dispatch's host wait (token_dispatch.py; 0: none, or not priced)
    serial_pipeline_transfers: bool = False
    reduces_gradients_after_flush: bool = False
    all_reduces_fp32_gradients: bool = False
    measured_shortfall: MeasuredShortfall | None = None
    memory: StackMemory = StackMemory()  # what it decides of memory alone (its loss kernel, its blocks, ...)
    # The strategies this codebase trains with, as our configs name them: Megatron-LM's TP x PP x DP with a
    # distributed optimizer is our engine's layout, llm-foundry trains with torch FSDP, and so on.
    strategies: tuple[Strategy, ...] = ALL_STRATEGIES

    def attention_kernel(self, gpu: GpuSpec, config: TrainingConfig) -> tuple[float, str]:
        """(this config's fused attention's rate against the kernel and length its GPU's attention factor is read
        at, what that rate is for the estimate's source: "" where it is the factor's own).

        The factor (library_efficiency.py) is FlashAttention-2's on Ampere and Hopper and cuDNN's at 4k tokens on
        Blackwell, whose rate grows with the length (attention_curves.py). Our context parallelism attends each
        chunk but the diagonal one with torch's lower-right causal bias, which calls FlashAttention-2 (or the
        memory-efficient kernel) directly, not cuDNN's (CausalBias._dispatch, torch/nn/attention/bias.py):
        FlashAttention-2's curve there. A stack with a Hopper-native kernel on Hopper: HOPPER_NATIVE_ATTENTION_SPEEDUP
        at 4k, growing with the length as cuDNN's rate does. Under context parallelism each call attends a rank's
        share of the sequence (ring attention's s / cp per step; ours s / 2cp queries against up to s keys): the
        curves are read at s / cp. A stack pinned to FlashAttention-2 (runs_flash_attention_2) runs its curve on
        every GPU. Eager attention: 1."""
        if config.attention is not AttentionKernel.SDPA:
            return 1.0, ""
        factors = library_efficiency(gpu)
        tokens = config.seq_len // config.context_parallel
        under_our_cp = config.context_parallel > 1 and not self.native_attention_under_cp
        if self.runs_flash_attention_2 or under_our_cp:
            if factors.fa2_attention is None and not factors.fa2_curve:
                # FlashAttention-2 is the factor's kernel (Ampere, Hopper), or no FlashAttention-2 was measured apart
                # (CDNA: its factor's own kernel and curve; Volta and Turing: the memory-efficient kernel).
                rate = factors.attention_at(tokens) / factors.attention
                return rate, (f"the measured kernel at {tokens} tokens" if rate != 1.0 else "")
            rate = factors.flash_attention_2_at(tokens) / factors.attention
            who = "which our context parallelism's chunks run" if under_our_cp else "which this stack runs"
            where = " a rank" if config.context_parallel > 1 else ""
            return rate, f"FlashAttention-2, {who}, at {tokens} tokens{where}"
        rate = factors.attention_at(tokens) / factors.attention
        if self.hopper_native_attention and gpu.architecture.startswith("Hopper"):
            speedup = HOPPER_NATIVE_ATTENTION_SPEEDUP * factors.native_growth_at(tokens)
            kernel = "a Hopper-native kernel, cuDNN's or FlashAttention-3"
            return rate * speedup, f"{kernel}: x{speedup:.2f} FlashAttention-2's at {tokens} tokens"
        return rate, (f"the measured kernel at {tokens} tokens" if rate != 1.0 else "")

    def stack_memory(self) -> StackMemory:
        """What this codebase decides of a step's memory (planner/memory/stack_memory.py)."""
        return self.memory


# What this project's strategies run (DDP, FSDP, DeepSpeed and the engine all train
# transformers' modules; the engine pipelines with torch.distributed.pipelining).
# Collectives are taken at NCCL's aggregated rate, as llm-foundry's FSDP measured.
OUR_STRATEGIES = Implementation(
    "transformers modules (this project's backends)",
    KernelStack.HF_EAGER,
    False,
    False,
    transformers_attention=True,
    expert_tokens_split_over_tp=False,
    memory=OURS,  # the eager loss, compiled under --kernels compile
    hopper_native_attention=True,  # torch 2.13's SDPA runs cuDNN's attention on sm90
    native_attention_under_cp=False,
)
LLM_FOUNDRY = Implementation(
    "llm-foundry (MPT, torch FSDP)",
    KernelStack.FUSED,
    False,
    False,
    memory=StackMemory(LossKernel.FUSED),
    strategies=(Strategy.FSDP,),
)
# Megatron-LM's fused kernels with attention dropout (p = 0.1, its default) after the fused softmax, as in
# Megatron-DeepSpeed, whose attention is Megatron-LM's (attention_chain.py; flash attention runs none of it).
MEGATRON_LM = Implementation(
    "Megatron-LM",
    KernelStack.MEGATRON_LM,
    True,
    False,
    overlaps_context_exchange=True,
    memory=StackMemory(LossKernel.MEGATRON, gelu_keeps_input=True, gradient_buffer=True),
    strategies=(Strategy.ENGINE,),
)
# Megatron-DeepSpeed's fused kernels with its attention dropout (p = 0.1, its default) after the fused softmax, the
# extra s x s passes traced in attention_chain.py; a row whose code ran otherwise says so (BLOOM's ALiBi: the
# `kernel_stack` key of benchmarks/data/published_runs.yaml).
MEGATRON_DEEPSPEED = Implementation(
    "Megatron-DeepSpeed (DeepSpeed pipeline engine, attention dropout after the fused softmax)",
    KernelStack.MEGATRON_DEEPSPEED,
    True,
    False,
    serial_pipeline_transfers=True,
    reduces_gradients_after_flush=True,
    memory=StackMemory(LossKernel.MEGATRON, gelu_keeps_input=True),
    strategies=(Strategy.ENGINE, Strategy.DEEPSPEED),
)
# The same code as MT-NLG (2021) and BigScience (2022) ran it, on DeepSpeed 0.5-0.6: a cost its runs measure and
# no mechanism read accounts for, calibrated on BigScience's sweeps (measured_shortfall.py).
MEGATRON_DEEPSPEED_2022 = replace(
    MEGATRON_DEEPSPEED,
    name="Megatron-DeepSpeed of 2021-2022 (DeepSpeed 0.5-0.6; MT-NLG's and BigScience's runs), its measured shortfall",
    measured_shortfall=MEGATRON_DEEPSPEED_2022_SHORTFALL,
)
DEEPSPEED_ZERO3_2021 = Implementation(
    "DeepSpeed ZeRO-3 as of 2021 (Megatron GPT model)", KernelStack.FUSED, False, True,
    memory=StackMemory(gelu_keeps_input=True), strategies=(Strategy.DEEPSPEED,),
)  # fmt: skip
# torchtitan (FSDP2, its own Llama): eager, its RMSNorm and rotary are chains of small kernels as in transformers;
# `--kernels compile` (torchtitan's --compile) fuses them. Collectives as llm-foundry's FSDP measured.
# torchtitan puts cuDNN's attention first on every GPU since 6a3a9da95 (2025-10-09; sdpa_kernel with set_priority in
# torchtitan/models/common/attention.py at b5bcd76c6), its context parallelism included (torch's ring attention has
# cuDNN handlers); its published rows ran earlier versions and say so (attention_kernel).
TORCHTITAN = Implementation("torchtitan (FSDP2, its own Llama; --kernels compile for torch.compile)",
                            KernelStack.HF_EAGER, False, False,
                            memory=StackMemory(compiles_loss=True, unsharded_stage_under_pp=True),
                            hopper_native_attention=True, strategies=(Strategy.FSDP, Strategy.ENGINE))  # fmt: skip
DEEPSEEK_DUALPIPE = Implementation(
    "DeepSeek-V3's stack (DualPipe, overlapped expert all-to-all)",
    KernelStack.FUSED,
    False,
    False,
    overlaps_expert_all_to_all=True,
    bidirectional_pipeline=True,
    strategies=(Strategy.ENGINE,),
)
# The Megatron-LM of September 2019 as DeepSpeedExamples' Megatron-LM folder runs it (at 5426d18a, ZeRO-2's
# release): Megatron's own TP, torch's DDP (the ZeRO paper's baseline) or DeepSpeed's ZeRO-1/2 around its GPT-2.
# No pipeline; DeepSpeed's collectives as the 2021 preset's (docs/accuracy.md, "The mechanism, read in the code").
MEGATRON_2019 = Implementation(
    "Megatron-LM of September 2019 (unfused attention softmax; the ZeRO and ZeRO-Offload papers' code)",
    KernelStack.MEGATRON_2019,
    False,
    True,
    strategies=(Strategy.DDP, Strategy.DEEPSPEED, Strategy.ENGINE),
)

# Megatron-Core with Transformer Engine as NVIDIA's Megatron-Bridge recipes run it today: Megatron-LM's mechanisms,
# the TP collectives under the GEMMs (userbuffers, `tp_comm_overlap`) and TE's Hopper-native attention; checked on
# NVIDIA's DGX-H100 runs (docs/accuracy.md, "Megatron-Core via Megatron-Bridge").
MEGATRON_CORE = replace(
    MEGATRON_LM,
    name="Megatron-Core with Transformer Engine (TP communication overlap, Hopper-native attention)",
    overlaps_tensor_parallel_comm=True,
    hopper_native_attention=True,
    memory=replace(MEGATRON_LM.memory, shards_dense_over_data_parallel=True, te_blocks=True, fp8_weights=True),
)

IMPLEMENTATIONS = {
    "ours": OUR_STRATEGIES,
    "llm-foundry": LLM_FOUNDRY,
    "megatron": MEGATRON_LM,
    "megatron-core": MEGATRON_CORE,
    "megatron-deepspeed": MEGATRON_DEEPSPEED,
    "megatron-deepspeed-2022": MEGATRON_DEEPSPEED_2022,
    "megatron-2019": MEGATRON_2019,
    "deepspeed-zero3-2021": DEEPSPEED_ZERO3_2021,
    "deepspeed": DEEPSPEED_ZERO3_2021,  # the published DeepSpeed runs we can check against are these
    "deepseek-dualpipe": DEEPSEEK_DUALPIPE,
    "torchtitan": TORCHTITAN,
}


def implementation_named(name: str) -> Implementation:
    """`--implementation NAME`'s preset; one line naming the choices otherwise."""
    from planner.errors import UserInputError

    preset = IMPLEMENTATIONS.get(str(name).strip().lower())
    if preset is None:
        raise UserInputError(f"--implementation must be one of {', '.join(IMPLEMENTATIONS)}, not {name!r}")
    return preset


def runs_kernels_on_split_models(name: str) -> bool:
    """Whether `--implementation NAME`'s codebase runs --kernels compile or liger on tensor- or pipeline-split
    models: ours does not (backends/parallelize.py compiles or patches whole replicas only and refuses a split model
    at start-up, so the planner neither estimates nor searches those); other codebases' presets (torchtitan) do."""
    return implementation_named(name) is not OUR_STRATEGIES


# One text for the estimate's refusal and the search's note.
KERNELS_ON_SPLIT_MODELS = (
    "our engine compiles (or patches) whole replicas only and refuses a tensor- or pipeline-split model at start-up "
    "(backends/parallelize.py)"
)


# How --strategy names each strategy (DeepSpeed by its stage).
_STRATEGY_FLAGS = {
    Strategy.DDP: "ddp",
    Strategy.FSDP: "fsdp",
    Strategy.DEEPSPEED: "zero0-zero3",
    Strategy.ENGINE: "engine",
}


def check_implementation_runs(name: str, strategy: Strategy) -> None:
    """`--implementation NAME` beside a --strategy that codebase does not train with is one line: its speed would
    be a number for a run nobody makes."""
    from planner.errors import UserInputError

    preset = implementation_named(name)
    if strategy not in preset.strategies:
        runs = " or ".join(_STRATEGY_FLAGS[kind] for kind in preset.strategies)
        raise UserInputError(
            f"--implementation {name.strip().lower()} predicts {preset.name}, which trains with --strategy {runs}, "
            f"not {strategy.display_name}: pick one of those, or drop --implementation"
        )
