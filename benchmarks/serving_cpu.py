"""The decode roofline against measured decode steps on this machine's CPU (docs/accuracy.md, "Serving").

    python -m benchmarks.serving_cpu [--json]

No GPU is here, so the check is of the mechanism, not of a GPU's efficiency:
a Llama-architecture model (random weights, built from a config, bf16) is
prefilled and then decoded step by step with transformers' KV cache; the
mean step time is compared with the planner's decode time for the same
request on a "GPU" whose bandwidth and peak are this CPU's, measured here
(a streaming read of 1 GiB; a large bf16 matmul). What is checked: that a
decode step costs the bytes it reads (weights + KV cache at its length) over
the bandwidth, growing with the context and flat in the batch until compute
binds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

STEPS = 8
CASES = [(1, 128), (1, 2048), (4, 128), (4, 1024), (16, 128)]  # (batch, context)


def _best_of(fn, repeats: int = 5) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def measure_host() -> tuple[float, float]:
    """(read bandwidth bytes/s, bf16 matmul FLOP/s) of this machine."""
    import torch

    big = torch.ones(2**28, dtype=torch.float32)  # 1 GiB
    bandwidth = big.numel() * 4 / _best_of(lambda: big.sum())
    a = torch.randn(2048, 2048, dtype=torch.bfloat16)
    flops = 2 * 2048**3 / _best_of(lambda: a @ a)
    return bandwidth, flops


def build_model():
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        hidden_size=2048,
        intermediate_size=5632,
        num_hidden_layers=8,
        num_attention_heads=16,
        num_key_value_heads=4,
        vocab_size=32000,
        max_position_embeddings=4096,
    )
    torch.manual_seed(0)
    return LlamaForCausalLM(config).to(torch.bfloat16).eval(), config


def measured_step_s(model, batch: int, context: int) -> float:
    import torch

    ids = torch.randint(0, model.config.vocab_size, (batch, context))
    with torch.no_grad():
        out = model(input_ids=ids, use_cache=True, logits_to_keep=1)
        cache, token = out.past_key_values, out.logits[:, -1:].argmax(-1)
        times = []
        for _ in range(STEPS):
            start = time.perf_counter()
            out = model(input_ids=token, cache=cache, use_cache=True)
            times.append(time.perf_counter() - start)
            cache, token = out.past_key_values, out.logits[:, -1:].argmax(-1)
    return statistics.median(times[1:])


def predicted_step_s(config_dict: dict, bandwidth: float, flops: float, batch: int, context: int) -> float:
    from planner.hardware.cluster import make_cluster
    from planner.hardware.gpus import resolve_gpu
    from planner.inference import InferenceRequest, serving_speed
    from planner.inference.speed import HBM_EFFICIENCY, STEP_OVERHEAD_S
    from planner.models.hf_config import spec_from_hf_config
    from planner.throughput.constants import CONSTANTS

    spec = spec_from_hf_config(config_dict, name="cpu-llama")
    cpu = resolve_gpu("cpu")
    # A "GPU" with this CPU's measured figures, so the roofline's own efficiencies cancel out.
    host = cpu.model_copy(
        update={
            "memory_bandwidth_GBps": bandwidth / 1e9 / HBM_EFFICIENCY,
            "dense_tflops": cpu.dense_tflops.model_copy(update={"bf16": flops / 1e12 / CONSTANTS.matmul_peak_fraction}),
        }
    )
    request = InferenceRequest(context=context, output=2 * STEPS, batch=batch, block_tokens=1)
    speed = serving_speed(spec, request, make_cluster(host, gpus_per_node=1), 1, 1)
    return speed.itl_s - STEP_OVERHEAD_S  # the CUDA-graph engine's step cost does not apply to eager CPU decoding


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(max(torch.get_num_threads(), 1))
    bandwidth, flops = measure_host()
    model, config = build_model()
    rows = []
    for batch, context in CASES:
        measured = measured_step_s(model, batch, context)
        predicted = predicted_step_s(config.to_dict(), bandwidth, flops, batch, context)
        rows.append(
            {
                "batch": batch,
                "context": context,
                "measured_ms": measured * 1e3,
                "predicted_ms": predicted * 1e3,
                "error": predicted / measured - 1,
            }
        )
    if args.json:
        print(json.dumps({"bandwidth_GBps": bandwidth / 1e9, "bf16_TFLOPs": flops / 1e12, "rows": rows}, indent=2))
        return
    print(f"host: {bandwidth / 1e9:.1f} GB/s read, {flops / 1e12:.3f} bf16 TFLOP/s")
    print("| batch | context | measured ms/step | roofline ms/step | error |")
    print("|---|---|---|---|---|")
    for row in rows:
        print(
            f"| {row['batch']} | {row['context']} | {row['measured_ms']:.1f} | {row['predicted_ms']:.1f} | "
            f"{row['error']:+.0%} |"
        )
    print(f"median |error| {statistics.median(abs(row['error']) for row in rows):.0%}")


if __name__ == "__main__":
    main()
