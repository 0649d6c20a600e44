"""What a MoE token dispatcher costs beside its all-to-all: the host wait of Megatron-Core's plain "alltoall".

Megatron-Core's "alltoall" token dispatcher copies each expert all-to-all's token counts to the host and waits for
them before the exchange ("A synchronization is needed before expert parallel AlltoAll communication to get the
`input_splits` and `output_splits` CPU values", megatron/core/transformer/moe/token_dispatcher.py), so the host cannot
queue a MoE block's kernels ahead of the GPU; its "flex" dispatcher (HybridEP, DeepEP) exchanges the tokens in its own
kernels. The estimate prices both exchanges as the same all-to-all (communication.py), which fits every flex row of
Megatron-Bridge's performance summary within 15% (docs/accuracy.md, "Megatron-Core via Megatron-Bridge on Blackwell").

The wait is not derived from a kernel count (none was read); it is measured, by the one pair of published runs that
differ in the dispatcher alone. Megatron-Bridge's performance archive (docs/performance-summary-archive.md at
067f987df, lines 356 and 256) prints Qwen3-235B-A22B on 256 DGX-B300 GPUs (MXFP8, global batch 8192, micro-batch 2,
4,096 tokens, PP 8, EP 8, no all-to-all overlap, no CUDA graphs) at 4,865 tokens/s/GPU in the 26.04 container, with
the plain dispatcher, and at 5,936 in 26.04.01, whose recipe's one change is the HybridEP flex dispatcher (6a5c997e7,
PR #3490 via #3675: `moe_token_dispatcher_type = "flex"`, the only Qwen3 recipe change between v0.4.0 and v0.4.2).
The same model's flex rows moved by at most 0.6% between the two containers (GB200 840 -> 840, GB300 1035 -> 1029
model TFLOP/s). Step times 8192 x 4096 / (256 x tokens/s): 26.94 s and 22.08 s. The 4.86 s between them, over the
128 micro-batches a pipeline runs (8192 / 32 data-parallel replicas / 2) and the 11 MoE blocks of the stage the
estimate paces the step by (compute.py: the last, 11 blocks beside the loss, of 94 blocks over 8 stages), is
ALLTOALL_HOST_WAIT_S a dispatch, so that the estimate's step grows by the measured 4.86 s. Megatron-Bridge's own split
(the embedding and the loss as slots, 96 over 8 stages) puts 12 blocks on the middle stages: over 12, the wait would
be 3.16 ms, 8% less.

Assumed, and tested by the rows it was not measured on: the wait is the host's, so it is paid once per dispatch
(each MoE block's forward, again where a full or op-level recomputation repeats it, as communication.py repeats
the block's all-to-alls), whatever the micro-batch or the GPU
(tests/test_token_dispatch.py: the B200 row of the same model at micro-batch 1 and GPT-OSS 120B on H100s, both with
the plain dispatcher). Our engine's expert parallelism also reads its counts on the host before the exchange
(backends/expert_parallel/dispatch.py, `tolist()`); not charged, its host work per block not being Megatron-Core's.
"""

from __future__ import annotations

# Megatron-Bridge's B300 pair above: 4.86 s / (128 micro-batches x 11 MoE blocks), in seconds a dispatch (3.45 ms).
MEASURED_STEP_DIFFERENCE_S = 8192 * 4096 / 256 * (1 / 4865 - 1 / 5936)
MEASURED_DISPATCHES = 128 * 11
ALLTOALL_HOST_WAIT_S = MEASURED_STEP_DIFFERENCE_S / MEASURED_DISPATCHES

# The dispatchers a published row can name (`token_dispatcher` in benchmarks/data/published_stack_runs.yaml), by the
# host wait each adds to a dispatch. "flex" is what the estimate's all-to-all already prices.
HOST_WAIT_S = {"alltoall": ALLTOALL_HOST_WAIT_S, "flex": 0.0}
