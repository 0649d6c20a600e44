"""The throughput model's constants: a few fitted, the rest stated assumptions.

FITTED values come from benchmarks/accuracy/calibrate_throughput.py, which fits them on
`calibration_llm_foundry_a100_40gb` of the shared reference (78 measured MPT
runs, A100-40GB, FSDP, 8-128 GPUs) by minimising the median absolute relative
error of tokens/s. Re-run it after changing the model and paste its output here.
ASSUMED values are order-of-magnitude figures from public descriptions of the
hardware and libraries, named where they are used.
"""

from __future__ import annotations

from dataclasses import dataclass

CALIBRATION_SOURCE = "calibration: fitted on llm-foundry A100-40GB runs (benchmarks/accuracy/calibrate_throughput.py)"


@dataclass(frozen=True)
class ThroughputConstants:
    # FITTED. Fraction of the dense peak a large, compute-bound matmul reaches.
    matmul_peak_fraction: float = 0.852
    # FITTED. Weight of a matmul's memory traffic (inputs, weights, output) against
    # its arithmetic: time = (flops/peak + k * bytes/bandwidth) / peak_fraction.
    # k < 1 because tiles are reused from cache; this is what makes a thin matmul
    # (small micro-batch x sequence, small hidden or TP shard) slow.
    matmul_traffic_weight: float = 0.658
    # FITTED. HBM passes of the element-wise work (norms, activations, residual
    # adds, rotary, loss over the vocabulary) per element the block writes.
    elementwise_passes: float = 3.55
    # FITTED. Fraction of peak the fused (flash) attention kernel reaches on the
    # s x s products it actually computes.
    attention_peak_fraction: float = 0.333
    # FITTED. Share of a collective's duration that still costs compute time when
    # it is overlapped (NCCL kernels occupy SMs and HBM bandwidth).
    overlap_interference: float = 0.50

    # ASSUMED. Fraction of link bandwidth NCCL ring collectives reach (bus bandwidth).
    link_efficiency: float = 0.8
    # ASSUMED. Host-side cost of one eager PyTorch op (dispatch, autograd, launch); kernels
    # shorter than this leave the GPU idle.
    kernel_launch_s: float = 8e-6
    # ASSUMED. Kernels per block: forward ~20 (norms, projections, rotary, views,
    # attention, activation, residual adds), backward about twice that.
    kernels_per_block_forward: int = 20
    # ASSUMED. Flash attention's backward does 2.5x its forward's matmul work
    # (it recomputes the s x s scores: 5 matmuls against the forward's 2).
    attention_backward_ratio: float = 2.5
    # MEASURED. Parameters per second a node's CPUs update with Adam: DeepSpeed's vectorised CPUAdam
    # and torch's Adam on the CPU (FSDP offload). Ren et al., ZeRO-Offload (USENIX ATC 2021,
    # arXiv:2101.06840), Table 4, "Adam latency (s)" on a DGX-2's two Xeon Platinum 8168: 10 billion
    # parameters in 2.57 s (CPU-Adam) and 14.76 s (PT-CPU); 3.3-4.5e9 and 0.67-0.73e9 per second over its
    # 1B-10B rows (read as a page image: Elvin-Ma/ai_papers zero/images/zero-offload-table4.jpg).
    cpu_adam_params_per_s_deepspeed: float = 3.9e9
    cpu_adam_params_per_s_torch: float = 0.68e9
    # ASSUMED. HBM bytes the GPU optimizer step moves per trainable parameter
    # (AdamW, fp32 master: read p, g, m, v and write p, m, v, and the 16-bit copy).
    optimizer_bytes_per_param: float = 28.0
    # ASSUMED. DDP's gradient bucket (torch default 25 MiB); the last one is not overlapped.
    ddp_bucket_bytes: float = 25 * 2**20


CONSTANTS = ThroughputConstants()
