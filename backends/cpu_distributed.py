"""What it takes to run a plan on CPU processes (gloo): GPU plans under --tiny, DeepSpeed and accelerate.

A plan emitted for CUDA GPUs runs with --tiny on a machine without them as
CPU processes over gloo (runs_on_cpu_instead); without --tiny it is refused.
DeepSpeed and accelerate have two gaps, found running the emitted configs on
this project's CPU CI:
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

import functools
import importlib
import os
import sys

from planner.errors import UserInputError

NEEDS_GPUS = (
    "this plan runs on CUDA GPUs (device cuda, nccl) and this machine has none; "
    "pass --tiny for a CPU smoke run of the same layout, or run it on the planned GPUs"
)
CPU_FALLBACK_NOTE = "note: no CUDA GPU here; running this GPU plan's --tiny smoke run on CPU with gloo"


def lacks_cuda_for(device: str) -> bool:
    """A cuda plan on a machine without CUDA: the question alone, without runs_on_cpu_instead's note or error."""
    if device != "cuda":
        return False
    import torch

    return not torch.cuda.is_available()


def runs_on_cpu_instead(device: str, *, tiny: bool) -> bool:
    """True when a plan for `device` must run on CPU processes with gloo here: a cuda plan, no CUDA, and --tiny
    (the laptop smoke test before the cluster; rank 0 says so on stderr). Without --tiny that is a user error."""
    if not lacks_cuda_for(device):
        return False
    if not tiny:
        raise UserInputError(NEEDS_GPUS)
    _announce_cpu_fallback()
    return True


@functools.cache
def _announce_cpu_fallback() -> None:
    """Once per process (backends/train.py hands engine plans on to backends.run, which asks again), rank 0 only."""
    if os.environ.get("RANK", "0") == "0":
        print(CPU_FALLBACK_NOTE, file=sys.stderr)


def skip_deepspeed_shm_build() -> None:
    """Make DeepSpeed's torch backend use plain gloo collectives instead of building its shm op."""
    comm = importlib.import_module("deepspeed.comm.torch")  # the module, not deepspeed.comm's `torch` attribute
    comm.build_shm_op = lambda: None


def configure_launched_cpu_state(strategy: str) -> bool:
    """configure_cpu_accelerate_state in a process a launcher started (torchrun's WORLD_SIZE, an MPI launcher's
    variables), where the process group can form; False elsewhere: a notebook building a CPU plan's
    TrainingArguments to read them gets them without accelerate's gloo state (which raised there)."""
    from backends.mpi.environment import launched_world_size

    if launched_world_size(os.environ) == 1:  # no launcher (or one process): no process group to form
        return False
    configure_cpu_accelerate_state(strategy)
    return True


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
