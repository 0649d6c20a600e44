"""The activation checkpointing modes the search tries, in order, and which one's fit makes another's slower.

AC_ORDER lists the modes from the least recomputation to the most. DOMINATED_BY says, for each mode, the modes
whose fitting candidate is never slower than the same candidate at this mode: none dominates every mode, selective
and op each dominate full, and neither of those two dominates the other (op recomputes the skipped matmuls and
the element-wise ops, selective the attention kernel; either can be the faster). planner/search/candidates.py
prunes by it; tests/test_search_pruning.py checks the pruned search against an exhaustive evaluation and that no
dominated candidate is faster. searched_checkpointing leaves op-level checkpointing out where it is not counted
(planner/memory/op_checkpointing.py). docs/search.md, "Speed".
"""

from __future__ import annotations

from planner.memory.op_checkpointing import check_supported, supports
from planner.models.spec import ModelSpec
from planner.training_config import ActivationCheckpointing

AC_ORDER = (
    ActivationCheckpointing.NONE,
    ActivationCheckpointing.SELECTIVE,
    ActivationCheckpointing.OP,
    ActivationCheckpointing.FULL,
)


def searched_checkpointing(
    spec: ModelSpec, asked: tuple[ActivationCheckpointing, ...], lora: bool = False
) -> list[ActivationCheckpointing]:
    """The asked modes in AC_ORDER, without op-level checkpointing where it is not counted (MoE, encoder-decoders:
    planner/memory/op_checkpointing.py; LoRA: training_config.py); asking for op alone there is its one-line
    error (the config's own, when it is built)."""
    modes = [ac for ac in AC_ORDER if ac in asked]
    if ActivationCheckpointing.OP in modes and (lora or not supports(spec)) and len(modes) > 1:
        modes.remove(ActivationCheckpointing.OP)
    elif modes == [ActivationCheckpointing.OP]:
        check_supported(spec)
    return modes


# The modes whose fitting candidate makes the same candidate at this mode slower for certain (less recomputation).
DOMINATED_BY = {
    ActivationCheckpointing.NONE: (),
    ActivationCheckpointing.SELECTIVE: (ActivationCheckpointing.NONE,),
    ActivationCheckpointing.OP: (ActivationCheckpointing.NONE,),
    ActivationCheckpointing.FULL: (
        ActivationCheckpointing.NONE,
        ActivationCheckpointing.SELECTIVE,
        ActivationCheckpointing.OP,
    ),
}
