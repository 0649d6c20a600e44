"""How the training code behind a run behaves, where implementations differ enough to matter.

The throughput model's mechanisms are the same for every run; these switches
say which variant of three of them a codebase uses. Each preset is an explicit,
documented assumption, never a factor fitted to single runs:

- kernels: fused norms and rotary, or transformers' eager op chains (kernel_stack.py).
- p2p_scatter_gather: Megatron-LM splits each pipeline stage-boundary tensor
  over the TP ranks' NICs and re-gathers it over NVLink (Narayanan et al. 2021,
  section 4.1); torch.distributed.pipelining and DeepSpeed's pipeline engine
  send the whole tensor from every TP rank.
- sharded_gather_per_gpu_nic: whether a ZeRO-3 / FSDP parameter all-gather and
  gradient reduce-scatter spanning nodes reaches the node's combined NIC
  bandwidth (NCCL's rings pass each chunk into a node once, then over NVLink:
  how llm-foundry's FSDP runs behave, calibration) or only each GPU's own NIC.
  The second is INFERRED from Narayanan et al. Table 2, where DeepSpeed ZeRO-3
  (2021) on 384-2240 A100s ran at the speed that per-GPU-NIC bound predicts
  (benchmarks/data/published_runs.yaml), not read from DeepSpeed's code.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.throughput.kernel_stack import KernelStack


@dataclass(frozen=True)
class Implementation:
    name: str
    kernels: KernelStack
    p2p_scatter_gather: bool
    sharded_gather_per_gpu_nic: bool


# What this project's strategies run (DDP, FSDP, DeepSpeed and the engine all train
# transformers' modules; the engine pipelines with torch.distributed.pipelining).
# Collectives are taken at NCCL's aggregated rate, as llm-foundry's FSDP measured.
OUR_STRATEGIES = Implementation("transformers modules (this project's backends)", KernelStack.HF_EAGER, False, False)
LLM_FOUNDRY = Implementation("llm-foundry (MPT, torch FSDP)", KernelStack.FUSED, False, False)
MEGATRON_LM = Implementation("Megatron-LM", KernelStack.FUSED, True, False)
MEGATRON_DEEPSPEED = Implementation("Megatron-DeepSpeed (DeepSpeed pipeline engine)", KernelStack.FUSED, False, False)
DEEPSPEED_ZERO3_2021 = Implementation(
    "DeepSpeed ZeRO-3 as of 2021 (Megatron GPT model)", KernelStack.FUSED, False, True
)

IMPLEMENTATIONS = {
    "ours": OUR_STRATEGIES,
    "llm-foundry": LLM_FOUNDRY,
    "megatron": MEGATRON_LM,
    "megatron-deepspeed": MEGATRON_DEEPSPEED,
    "deepspeed-zero3-2021": DEEPSPEED_ZERO3_2021,
    "deepspeed": DEEPSPEED_ZERO3_2021,  # the published DeepSpeed runs we can check against are these
}


def implementation_named(name: str) -> Implementation:
    """`--implementation NAME`'s preset; one line naming the choices otherwise."""
    from planner.errors import UserInputError

    preset = IMPLEMENTATIONS.get(str(name).strip().lower())
    if preset is None:
        raise UserInputError(f"--implementation must be one of {', '.join(IMPLEMENTATIONS)}, not {name!r}")
    return preset
