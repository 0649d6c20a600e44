"""Model-state memory exactly as the ZeRO paper states it (Sec. 3.1, 5; Table 1).

Psi parameters, Nd data-parallel ranks, K bytes of optimizer state per
parameter (12 for mixed-precision Adam: fp32 master, momentum, variance).
Parameters and gradients are 2 bytes each (fp16). These are the paper's
figures, kept separate from what real frameworks allocate (model_states.py).
"""

from __future__ import annotations

PAPER_CITATION = "ZeRO paper (Rajbhandari et al., SC20), Sec. 5, Table 1"


def zero_paper_model_state_bytes(psi: float, dp_degree: int, stage: int, k: float = 12) -> float:
    """Per-device bytes of parameters + gradients + optimizer states.

    stage 0 is plain data parallelism, 1 is P_os, 2 is P_os+g, 3 is P_os+g+p.
    """
    if dp_degree < 1:
        raise ValueError("dp_degree must be at least 1")
    if stage == 0:
        return (2 + 2 + k) * psi
    if stage == 1:
        return 2 * psi + 2 * psi + k * psi / dp_degree
    if stage == 2:
        return 2 * psi + (2 + k) * psi / dp_degree
    if stage == 3:
        return (2 + 2 + k) * psi / dp_degree
    raise ValueError(f"ZeRO stage must be 0-3, got {stage}")
