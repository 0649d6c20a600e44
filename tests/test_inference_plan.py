"""Serving plans (planner/inference): the roofline's bounds, the layouts, the CLI and the selector.

References: the decode floor "every step reads every weight once", weight
bytes / HBM bandwidth (Pope et al. 2022, "Efficiently Scaling Transformer
Inference", section 2), and the prefill floor 2 x parameters x tokens FLOPs
at the GPU's dense peak (Kaplan et al. 2020); the planner's answers must lie
above both and within the stated efficiencies of them.
"""

from __future__ import annotations

import json
import re

import pytest

from hardware_selector_cli.app import main
from planner.errors import UserInputError
from planner.hardware.cluster import make_cluster
from planner.inference import InferenceRequest, plan_serving, serving_speed
from planner.inference.cost import serving_cost
from planner.inference.memory import weight_bytes
from planner.inference.speed import HBM_EFFICIENCY, STEP_OVERHEAD_S
from planner.models.resolve import resolve_model

CATALOG_LLMS = ["llama-2-7b", "llama-3-8b", "mistral-7b", "qwen2.5-7b", "llama-2-70b", "mixtral-8x7b"]


@pytest.mark.parametrize("name", CATALOG_LLMS)
def test_catalog_llms_plan_end_to_end_from_the_cli(capsys, name):
    argv = ["plan", "--mode", "inference", "--model", name, "--gpu", "H100-80GB", "--batch", "16", "--json"]
    assert main(argv) == 0
    document = json.loads(capsys.readouterr().out)
    best = document["best"]
    assert document["mode"] == "inference" and best is not None
    assert best["memory_bytes"]["total"] <= best["usable_bytes"]
    assert best["tensor_parallel"] * best["pipeline_parallel"] * best["replicas"] <= 8
    assert best["ttft_s"] > 0 and best["itl_s"] > 0 and best["cluster_tokens_per_s"] > 0
    assert set(best["memory_sources"]) == {"weights", "kv_cache", "activations", "overhead"}


@pytest.mark.parametrize(
    "name, gpu", [("llama-2-7b", "A100-80GB"), ("llama-3-8b", "H100-80GB"), ("mistral-7b", "L40S")]
)
def test_batch_one_decode_sits_just_above_the_weight_read_floor(name, gpu):
    spec, cluster = resolve_model(name), make_cluster(gpu, gpus_per_node=1)
    request = InferenceRequest(context=128, output=128, batch=1)
    speed = serving_speed(spec, request, cluster, 1, 1)
    floor = weight_bytes(spec, request, 1, 1) / (cluster.gpu.memory_bandwidth_GBps * 1e9)
    assert floor < speed.itl_s <= floor / HBM_EFFICIENCY * 1.05 + STEP_OVERHEAD_S
    assert speed.decode_bound == "memory"


def test_long_prefill_is_compute_bound_above_the_flops_floor():
    spec, cluster = resolve_model("llama-2-7b"), make_cluster("A100-80GB", gpus_per_node=1)
    request = InferenceRequest(context=4000, output=16, batch=4, batching="static")  # the 4 prompts prefilled together
    speed = serving_speed(spec, request, cluster, 1, 1)
    floor = 2 * spec.params.total * 4 * 4000 / (cluster.gpu.peak_tflops("bf16") * 1e12)
    assert speed.prefill_bound == "compute" and floor < speed.ttft_s < 2.5 * floor


@pytest.mark.parametrize("output", [1, 2, 4, 16, 128])
def test_many_clients_never_get_prompts_processed_faster_than_the_gpu_computes(output):
    """64 clients sending 2048-token prompts: the prompts the replica processes a second, at 2 x parameters FLOPs a
    token, never exceed the dense peak (the answer at one output token was 4x the H100's until the GPU's own bound,
    planner/inference/speed.py); at few output tokens the regime says the prefill sets the pace."""
    spec, cluster = resolve_model("llama-3.1-8b"), make_cluster("H100-80GB", gpus_per_node=1)
    request = InferenceRequest(context=2048, output=output, batch=64)
    speed = serving_speed(spec, request, cluster, 1, 1)
    requests_per_s = speed.request_tokens_per_s / output
    prompt_flops = 2 * spec.params.total * request.context * requests_per_s
    assert prompt_flops < cluster.gpu.peak_tflops("bf16") * 1e12
    assert speed.ttft_s >= serving_speed(spec, request.model_copy(update={"batch": 1}), cluster, 1, 1).ttft_s
    if output <= 4:
        assert speed.regime == "saturated (prefill)"


@pytest.mark.parametrize("context, output", [(16, 2), (128, 1), (2048, 2)])
def test_more_clients_never_cut_the_throughput_while_the_cache_holds_them(context, output):
    """A closed loop: each added client adds work, and the replica serves it or queues it, never less in all. The
    prefill wait read off an unqueued request time and clipped at 0.95 made 3 clients of 16-token prompts wait 10.5
    prefills where 2 waited one, 83 tokens/s against 222 (a review, 2026-11-30): the wait is now solved with the
    request time it makes. Past saturation the rate may sag a little (under 15% here): prompts queue for one prefill
    at a time, where engines batch several prompts into one prefill step (docs/inference.md, known limits)."""
    spec, cluster = resolve_model("llama-3-8b"), make_cluster("H100-80GB", gpus_per_node=1)
    rates = [
        serving_speed(spec, InferenceRequest(context=context, output=output, batch=batch), cluster, 1, 1)
        for batch in (1, 2, 3, 4, 6, 8, 16, 32)
    ]
    assert all(speed.running == speed_batch for speed, speed_batch in zip(rates, (1, 2, 3, 4, 6, 8, 16, 32)))
    tokens = [speed.request_tokens_per_s for speed in rates]
    assert all(later >= 0.85 * max(tokens[: index + 1]) for index, later in enumerate(tokens[1:])), tokens
    assert tokens[1] > tokens[0]  # a second client always adds


def test_short_prompts_at_long_outputs_wait_about_a_step_not_the_bound():
    """128-token prompts, 512 tokens out, 32 clients: far from saturation, the first token comes within a few decode
    steps (the first bound charged each prompt a whole weight read and put 136 ms on the TTFT for 3% of tokens/s)."""
    spec, cluster = resolve_model("llama-3-8b"), make_cluster("H100-80GB", gpus_per_node=1)
    speed = serving_speed(spec, InferenceRequest(context=128, output=512, batch=32), cluster, 1, 1)
    assert speed.regime == "batched" and speed.ttft_s < 3 * speed.itl_s


def test_requests_that_do_not_divide_over_the_replicas_are_counted_as_sent():
    """9 clients over 8 one-GPU replicas: one replica serves 2 and seven serve 1, so the cluster's tokens/s is that
    sum (it was counted as 8 x 2, the same as 16 clients); the latencies are the busier replica's."""
    spec, cluster = resolve_model("llama-3.1-8b"), make_cluster("H100-80GB", gpus_per_node=8)

    def best(batch: int):
        return plan_serving(spec, cluster, InferenceRequest(batch=batch, tensor_parallel=1)).best

    def replica(batch: int):
        return serving_speed(spec, InferenceRequest(batch=batch, tensor_parallel=1), cluster, 1, 1)

    nine = best(9)
    assert (nine.replicas, nine.batch_per_replica) == (8, 2)
    assert nine.cluster_tokens_per_s == pytest.approx(
        replica(2).request_tokens_per_s + 7 * replica(1).request_tokens_per_s
    )
    assert best(8).cluster_tokens_per_s < nine.cluster_tokens_per_s < best(16).cluster_tokens_per_s
    assert nine.itl_s == pytest.approx(replica(2).itl_s)
    assert any("2 requests on 1 replica and 1 on 7 replicas" in reason for reason in nine.reasons)
    cost = serving_cost(cluster.gpu, 8, nine.cluster_tokens_per_s)  # the summed tokens/s prices the 8 GPUs
    assert nine.usd_per_million_tokens == pytest.approx(cost.usd_per_million_tokens)


def test_batching_raises_throughput_and_quantizing_shortens_decode():
    spec, cluster = resolve_model("llama-3-8b"), make_cluster("A100-80GB", gpus_per_node=1)
    speeds = [serving_speed(spec, InferenceRequest(batch=batch), cluster, 1, 1) for batch in (1, 4, 16, 64)]
    assert all(a.decode_tokens_per_s < b.decode_tokens_per_s for a, b in zip(speeds, speeds[1:]))
    assert all(a.itl_s <= b.itl_s for a, b in zip(speeds, speeds[1:]))
    itl = {
        fmt: serving_speed(spec, InferenceRequest(weights=fmt), cluster, 1, 1).itl_s for fmt in ("bf16", "int8", "int4")
    }
    assert itl["int4"] < itl["int8"] < itl["bf16"]


def test_the_latency_objective_spreads_a_model_over_more_gpus_than_throughput():
    spec, cluster = resolve_model("llama-3-8b"), make_cluster("H100-80GB", gpus_per_node=8)
    by_throughput = plan_serving(spec, cluster, InferenceRequest(batch=64)).best
    by_latency = plan_serving(spec, cluster, InferenceRequest(batch=64, objective="latency")).best
    assert by_latency.tensor_parallel >= by_throughput.tensor_parallel
    assert by_latency.itl_s <= by_throughput.itl_s


def test_a_70b_model_needs_tensor_parallelism_and_says_why_one_gpu_is_rejected():
    result = plan_serving(resolve_model("llama-2-70b"), make_cluster("H100-80GB"), InferenceRequest(batch=8))
    assert result.best.tensor_parallel * result.best.pipeline_parallel >= 2
    assert "GiB usable" in result.rejected["1 GPU x 8 replicas"]


SUGGESTION_FORMS = [
    (re.compile(r"^--weights (\w+) fits on"), lambda m, c: ({"weights": m.group(1)}, c)),
    (re.compile(r"^--kv-cache fp8 fits on"), lambda m, c: ({"kv_cache": "fp8"}, c)),
    (
        re.compile(r"^\d+ x (\S+) \(--gpus-per-node (\d+) --nodes (\d+)\) fits"),
        lambda m, c: ({}, make_cluster(m.group(1), int(m.group(2)), int(m.group(3)))),
    ),
    (
        re.compile(r"^at \d+ GPUs?, (\S+) fits"),
        lambda m, c: ({}, make_cluster(m.group(1), c.gpus_per_node, c.num_nodes)),
    ),
]


@pytest.mark.parametrize(
    "name, gpu, gpus, batch, context",
    [
        ("llama-2-70b", "A10", 4, 1, 2048),
        ("llama-2-13b", "L4", 1, 16, 2048),
        ("mixtral-8x7b", "A100-40GB", 2, 64, 4096),
    ],
)
def test_every_serving_suggestion_fits_when_planned_as_printed(name, gpu, gpus, batch, context):
    spec, cluster = resolve_model(name), make_cluster(gpu, gpus_per_node=gpus)
    request = InferenceRequest(batch=batch, context=context)
    result = plan_serving(spec, cluster, request)
    assert result.best is None
    checked = 0
    for line in result.suggestions:
        for pattern, build in SUGGESTION_FORMS:
            if match := pattern.match(line):
                update, target = build(match, cluster)
                replanned = InferenceRequest.model_validate({**request.model_dump(), **update})
                assert plan_serving(spec, target, replanned).best is not None, line
                checked += 1
    assert checked >= 2, result.suggestions


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--model", "llama-2-7b", "--gpu", "A10", "--batch", "4"], "add --mode inference"),
        (["--mode", "inference", "--model", "llama-2-7b", "--gpu", "A10", "--global-batch", "4"], "training only"),
        (["--mode", "inference", "--model", "t5-small", "--gpu", "A10"], "decoder-only"),
        (["--mode", "inference", "--model", "llama-2-7b", "--gpu", "A100-80GB", "--weights", "fp8"], "no fp8"),
        (["--mode", "inference", "--model", "llama-2-7b", "--gpu", "A10", "--context", "4096"], "4096-token context"),
        (["--mode", "serve", "--model", "llama-2-7b", "--gpu", "A10"], "--mode must be"),
        (["--mode", "inference", "--model", "llama-2-7b", "--gpu", "A10", "--weights", "int3"], "--weights must be"),
        (
            ["--mode", "inference", "--model", "llama-2-7b", "--gpu", "A10", "--nvme-gb", "100"],
            "--nvme-gb: training only",
        ),
    ],
)
def test_bad_serving_input_is_one_line(capsys, argv, message):
    assert main(["plan", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and message in err and "\n" not in err, err


def test_what_would_serve_names_plan_flags(capsys):
    """plan --mode inference's suggestions name its own flags (planner/inference/flags.py), not the seed CLI's
    --batch-size or the API's keywords."""
    assert (
        main(
            [
                "plan",
                "--mode",
                "inference",
                "--model",
                "llama-3-8b",
                "--gpu",
                "T4",
                "--gpus-per-node",
                "1",
                "--batch",
                "4",
            ]
        )
        == 1
    )  # fmt: skip (nothing fits: exit code 1, docs/errors.md)
    out = capsys.readouterr().out
    assert out.startswith("nothing fits serving llama-3-8b on 1 x T4"), out
    assert "--weights int8 fits on 1 x T4" in out and "(--gpus-per-node 2 --nodes 1) fits" in out
    assert "a smaller --batch needs" in out and "--batch-size" not in out and "=" not in out


def test_plan_inference_table_fits_80_columns(monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["plan", "--mode", "inference", "--model", "llama-2-70b", "--gpu", "H100-80GB", "--batch", "32"]) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 80 and "…" not in out
    assert "TTFT" in out and "ITL" in out and "#1 TP" in out


def test_the_selector_answers_inference_tasks():
    from hardware_selector import get_inference_config, select_hardware_for_task

    result = select_hardware_for_task(
        "text_generation",
        "llama-2-13b",
        task_type="inference",
        batch_size=8,
        gpu_count=2,
        include_detected=False,
        candidates=["A100-80GB", "H100-80GB", "L4"],
    )
    primary = result["primary_recommendation"]
    assert primary["task_type"] == "inference" and result["gpu_count"] == 2
    costs = [option["usd_per_million_tokens"] for option in (primary, *result["fallback_options"])]
    priced = [cost for cost in costs if cost is not None]  # L4 has no price in planner/catalog/prices.yaml
    assert costs == sorted(priced) + [None] * (len(costs) - len(priced))
    config = get_inference_config(
        "text_generation", "llama-3-8b", gpu_count=1, batch_size=16, max_memory_gb=24, weights="int4"
    )
    assert config["fits"] and config["estimated_memory"]["per_gpu_gb"] <= 24
    assert config["estimated_latency"]["itl_ms"] > 0 and config["distributed_strategy"] == "single GPU"
    with pytest.raises(UserInputError, match="task_type must be"):
        select_hardware_for_task("text_generation", "gpt2", task_type="serving")


def test_the_explanation_counts_one_request_and_one_layout_in_the_singular(capsys):
    """One request on one L4: the plan's own numbers (the reference: its JSON) are 1, 1 and 1 layout, and the
    explanation says "1 request" and "1 fitting layout", never "1 requests"."""
    argv = ["plan", "--mode", "inference", "--model", "llama-3-8b", "--gpu", "L4", "--gpus-per-node", "1",
            "--batch", "1"]  # fmt: skip
    assert main([*argv, "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    best = document["best"]
    assert best["running_per_replica"] == best["batch_per_replica"] == 1 and len(document["candidates"]) == 1
    assert main([*argv, "--explain"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "1 request decoded per step" in out and "- 1 request per replica;" in out
    assert "ranked 1st of 1 fitting layout" in out and not re.search(r"\b1 (requests|fitting layouts)\b", out)


def test_a_request_key_that_is_not_a_field_is_refused():
    """Ignored, `outputs=64` would serve the default 256 tokens without a word."""
    with pytest.raises(ValueError, match=r"InferenceRequest\(\) takes no keyword 'outputs'; did you mean 'output'"):
        InferenceRequest(outputs=64)
    assert InferenceRequest(output=64).output == 64
