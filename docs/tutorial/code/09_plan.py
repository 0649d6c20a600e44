"""Chapter 9: choosing with `hardware-selector plan`: which of chapters 3-8, for your model and GPUs.

The same question at a real size: Llama-2 7B on 8 x A100-80GB, global batch
512 of 4096 tokens. The planner tries every strategy and layout the earlier
chapters showed, keeps those that fit, and explains its choice; the command
line is `hardware-selector plan --model llama-2-7b --gpu A100-80GB
--gpus-per-node 8 --global-batch 512 --seq-len 4096`.
"""

from hardware_selector import HardwareSelector
from planner.hardware.cluster import make_cluster
from planner.models.resolve import resolve_model
from planner.search import PlanRequest, search_plans

result = search_plans(
    resolve_model("llama-2-7b"), make_cluster("A100-80GB", gpus_per_node=8), PlanRequest(global_batch=512, seq_len=4096)
)
best = result.best
assert best is not None, result.suggestions
print(f"best: {best.config.strategy.value} {best.layout.describe()}, ZeRO stage {best.config.zero_stage}, "
      f"micro-batch {best.config.micro_batch} x accumulation {best.config.grad_accum}")  # fmt: skip
print(f"memory per GPU: {best.memory.per_gpu_bytes['total'] / 2**30:.1f} GiB of 80 ({best.memory.sources['total']})")
print(f"step time: {best.throughput.step_time_s:.2f} s, MFU {best.throughput.mfu:.0%}")
for reason in best.reasons[:3]:
    print(f"why: {reason}")
answer = HardwareSelector().get_distributed_training_config(
    "text_generation", "llama-2-7b", gpu_count=8, batch_size=4, max_memory_gb=80
)
print(f"the selector API agrees on the family: {answer['distributed_strategy']}")
