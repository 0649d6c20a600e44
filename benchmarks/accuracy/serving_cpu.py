"""The decode roofline against measured decode steps on this machine's CPU (docs/accuracy.md, "Serving").

    python -m benchmarks.accuracy.serving_cpu [--json]
    python -m benchmarks.accuracy.serving_cpu --smoke [--json]   # seconds: a 2-layer model, two short requests

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
import sys
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Workload:
    """The model decoded, the requests and how much of the host is measured."""

    model: dict  # LlamaConfig's keywords
    cases: tuple[tuple[int, int], ...]  # (batch, context)
    steps: int  # decode steps per case (the first is not counted)
    read_floats: int  # fp32 elements streamed for the bandwidth
    matmul: int  # side of the bf16 matmul for the peak


FULL = Workload(
    model={
        "hidden_size": 2048,
        "intermediate_size": 5632,
        "num_hidden_layers": 8,
        "num_attention_heads": 16,
        "num_key_value_heads": 4,
        "vocab_size": 32000,
        "max_position_embeddings": 4096,
    },
    cases=((1, 128), (1, 2048), (4, 128), (4, 1024), (16, 128)),
    steps=8,
    read_floats=2**28,  # 1 GiB
    matmul=2048,
)
# --smoke: the same path on a model and host figures too small to mean anything; the error it prints is noise.
SMOKE = Workload(
    model={
        "hidden_size": 128,
        "intermediate_size": 256,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": 1000,
        "max_position_embeddings": 256,
    },
    cases=((1, 16), (2, 32)),
    steps=3,
    read_floats=2**22,  # 16 MiB
    matmul=256,
)


def _best_of(fn, repeats: int = 5) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def measure_host(work: Workload) -> tuple[float, float]:
    """(read bandwidth bytes/s, bf16 matmul FLOP/s) of this machine."""
    import torch

    big = torch.ones(work.read_floats, dtype=torch.float32)
    bandwidth = big.numel() * 4 / _best_of(lambda: big.sum())
    a = torch.randn(work.matmul, work.matmul, dtype=torch.bfloat16)
    flops = 2 * work.matmul**3 / _best_of(lambda: a @ a)
    return bandwidth, flops


def build_model(work: Workload):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(**work.model)
    torch.manual_seed(0)
    return LlamaForCausalLM(config).to(torch.bfloat16).eval(), config


def measured_step_s(model, batch: int, context: int, steps: int) -> float:
    import torch

    ids = torch.randint(0, model.config.vocab_size, (batch, context))
    with torch.no_grad():
        out = model(input_ids=ids, use_cache=True, logits_to_keep=1)
        cache, token = out.past_key_values, out.logits[:, -1:].argmax(-1)
        times = []
        for _ in range(steps):
            start = time.perf_counter()
            out = model(input_ids=token, cache=cache, use_cache=True)
            times.append(time.perf_counter() - start)
            cache, token = out.past_key_values, out.logits[:, -1:].argmax(-1)
    return statistics.median(times[1:])


def predicted_step_s(config_dict: dict, bandwidth: float, flops: float, batch: int, context: int, steps: int) -> float:
    from planner.hardware.cluster import make_cluster
    from planner.hardware.gpus import resolve_gpu
    from planner.inference import InferenceRequest, serving_speed
    from planner.inference.roofline import EFFICIENCY
    from planner.inference.speed import HBM_EFFICIENCY, STEP_OVERHEAD_S
    from planner.models.hf_config import spec_from_hf_config

    spec = spec_from_hf_config(config_dict, name="cpu-llama")
    cpu = resolve_gpu("cpu")
    # A "GPU" with this CPU's measured figures, so the roofline's own efficiencies cancel out.
    host = cpu.model_copy(
        update={
            "memory_bandwidth_GBps": bandwidth / 1e9 / HBM_EFFICIENCY,
            "dense_tflops": cpu.dense_tflops.model_copy(update={"bf16": flops / 1e12 / EFFICIENCY.prefill_peak}),
        }
    )
    # a static batch: the measured steps decode the whole batch, with no other prompt in them
    request = InferenceRequest(context=context, output=2 * steps, batch=batch, block_tokens=1, batching="static")
    speed = serving_speed(spec, request, make_cluster(host, gpus_per_node=1), 1, 1)
    return speed.itl_s - STEP_OVERHEAD_S  # the CUDA-graph engine's step cost does not apply to eager CPU decoding


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--smoke", action="store_true", help="a 2-layer model and two short requests: seconds")
    args = parser.parse_args(argv)
    import torch

    work = SMOKE if args.smoke else FULL
    torch.set_num_threads(max(torch.get_num_threads(), 1))
    bandwidth, flops = measure_host(work)
    model, config = build_model(work)
    rows = []
    for batch, context in work.cases:
        measured = measured_step_s(model, batch, context, work.steps)
        predicted = predicted_step_s(config.to_dict(), bandwidth, flops, batch, context, work.steps)
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
        return 0
    print(f"host: {bandwidth / 1e9:.1f} GB/s read, {flops / 1e12:.3f} bf16 TFLOP/s")
    print("| batch | context | measured ms/step | roofline ms/step | error |")
    print("|---|---|---|---|---|")
    for row in rows:
        print(
            f"| {row['batch']} | {row['context']} | {row['measured_ms']:.1f} | {row['predicted_ms']:.1f} | "
            f"{row['error']:+.0%} |"
        )
    print(f"median |error| {statistics.median(abs(row['error']) for row in rows):.0%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
