"""What DeepSpeed and accelerate need to run a plan on CPU processes (gloo), and nothing on GPUs.

Two gaps, found running the emitted configs on this project's CPU CI:
- DeepSpeed's communication layer compiles a C++ shared-memory op
  (deepspeed_shm_comm) when it starts on the CPU accelerator: minutes of JIT
  build per fresh machine. gloo does the same collectives, so the build is
  skipped by making the op unavailable.
- accelerate enables FSDP and DeepSpeed only for accelerator devices; with
  `use_cpu` it silently falls back to plain multi-CPU. Pre-configuring the
  process state with gloo (and, for FSDP, marking it as a multi-device run)
  lets accelerate, and the HF Trainer through `use_configured_state`, apply
  the real FSDP2 / DeepSpeed wrappers on CPU tensors. DDP plans get
  accelerate's own MULTI_CPU state (its launcher would want mpirun for it).
"""

from __future__ import annotations

import importlib
import os


def skip_deepspeed_shm_build() -> None:
    """Make DeepSpeed's torch backend use plain gloo collectives instead of building its shm op."""
    comm = importlib.import_module("deepspeed.comm.torch")  # the module, not deepspeed.comm's `torch` attribute
    comm.build_shm_op = lambda: None


def configure_cpu_accelerate_state(strategy: str) -> None:
    """Initialise accelerate's process state on gloo so that `strategy` (ddp, fsdp or deepspeed) is honoured."""
    from accelerate import PartialState
    from accelerate.utils import DistributedType

    if strategy == "ddp":
        PartialState(cpu=True)  # MULTI_CPU on gloo: accelerate wraps the model in DDP
        return
    if strategy == "deepspeed":
        skip_deepspeed_shm_build()
        os.environ["ACCELERATE_USE_DEEPSPEED"] = "true"
    state = PartialState(backend="gloo")
    if strategy == "fsdp" and state.distributed_type is DistributedType.NO and state.num_processes > 1:
        # accelerate turns a multi-device state into FSDP when ACCELERATE_USE_FSDP
        # or an fsdp_plugin is present; the device itself stays the CPU.
        state.distributed_type = DistributedType.MULTI_GPU
