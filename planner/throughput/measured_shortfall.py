"""A cost a codebase's published runs measure and no mechanism read accounts for, calibrated on some of those runs
and checked on the others (docs/accuracy.md, "Megatron-DeepSpeed of 2021-2022: a measured cost").

Megatron-DeepSpeed as Microsoft/NVIDIA (MT-NLG, 2021) and BigScience (BLOOM and its benchmarks, 2022) ran it, on
DeepSpeed 0.5-0.6's pipeline engine, misses the estimate by 14-46% with every mechanism its code shows already
charged. BigScience's own benchmarks (github.com/bigscience-workshop/bigscience, train/tr11-176B-ml/
chronicles-prequel.md) measure its shape: the miss shrinks as the micro-batch grows at a fixed global batch, by a
cost per micro-batch slot of a stage that grows with the stage's layers. So the step of that code is taken as

    estimate x (1 + share) + per_slot_layer_s x (micro-batch slots of a stage: m + pp - 1) x (layers per stage)

with `share` and `per_slot_layer_s` fitted by least squares on BigScience's twelve 2022-02-21 sweep runs
(benchmarks/accuracy/megatron_deepspeed_microbatch_cost.py; tests/test_megatron_deepspeed_microbatch_cost.py holds
these constants to that fit and the runs it was not fitted on to it). What the cost is was not found in the code of
those runs: it is a measured record, not a mechanism, and every estimate it moves says so (`measured_shortfall_s`).
DeepSpeed's own 2023 runs of a later Megatron-DeepSpeed do not show it and take the `megatron-deepspeed` preset.
The cost is a fixed time per layer and slot, fitted at hidden 13,824-14,336 and checked at 6,144-20,480: for much
smaller layers it is an extrapolation.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MeasuredShortfall:
    share: float  # of the estimated step
    per_slot_layer_s: float  # seconds per micro-batch slot of a stage per layer on it
    source: str

    def seconds(self, step_s: float, micro_batches: int, pipeline_stages: int, layers: int) -> float:
        """What it adds to an estimated step of `micro_batches` per replica over `pipeline_stages` stages of
        `layers` in all: the share of the step, and each of a stage's m + pp - 1 slots times its layers."""
        slots = micro_batches + pipeline_stages - 1
        return step_s * self.share + self.per_slot_layer_s * slots * layers / pipeline_stages


MEGATRON_DEEPSPEED_2022_SHORTFALL = MeasuredShortfall(
    0.113,
    0.0108,
    "measured: Megatron-DeepSpeed of 2021-2022 (DeepSpeed 0.5-0.6's pipeline engine), the step x 1.113 + 10.8 ms per "
    "micro-batch slot per layer on a stage, fitted on BigScience's twelve 2022-02-21 sweep runs (181B-196B on "
    "320-384 A100s, micro-batch 1-8; chronicles-prequel.md of bigscience-workshop/bigscience) and checked on the "
    "runs it was not fitted on (MT-NLG, BLOOM, GPT-NeoX-20B, BigScience's other benchmarks); no mechanism read "
    "(planner/throughput/measured_shortfall.py)",
)
