"""Predicted vs published throughput of large-scale training runs the model was never fitted on.

    .venv/bin/python -m benchmarks.accuracy.validate_published_runs              # table + error summary
    .venv/bin/python -m benchmarks.accuracy.validate_published_runs --markdown   # the table for docs/accuracy.md
    .venv/bin/python -m benchmarks.accuracy.validate_published_runs --smoke      # every output once (a second)

Rows come from benchmarks/data/published_runs.yaml (Megatron-LM 2021 and 2022, MT-NLG, BLOOM,
GPT-NeoX, Megatron 2019 on V100s, and informational OPT, Llama 1-3 and DeepSeek-V3 rows) and
benchmarks/data/published_stack_runs.yaml (torch FSDP, DeepSpeed ZeRO-3 + offload and the HF
Trainer as their maintainers measured them, and Megatron-Core through Megatron-Bridge on DGX-H100), each
with its citation and confidence; a second table
shows benchmarks/data/published_zero_papers.yaml (DeepSpeed's ZeRO papers on V100s), summed up
apart from the held-out bounds (its header says why). Every run is
planned as our engine would run it (strategy engine: TP x PP x DP with the published ZeRO stage;
DeepSpeed ZeRO-3 rows as strategy deepspeed; the stack rows with the strategy that emits them), on
the catalog GPU and the published network, with the row's implementation preset
(planner/throughput/implementation.py: fused kernels for all of them,
Megatron-LM's scatter-gather pipeline transfers, DeepSpeed ZeRO-3's 2021
gathers). A paper that counts the recomputed forward
(Megatron's Eq. 3) is compared against our hardware FLOPs, otherwise against
model FLOPs; MFU is then predicted TFLOP/s over the dense peak either way.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

from planner.hardware.cluster import make_cluster
from planner.models.hf_config import spec_from_hf_config
from planner.models.resolve import resolve_model, spec_from_dimensions
from planner.models.spec import ModelSpec
from planner.throughput.estimate import estimate_throughput
from planner.throughput.implementation import IMPLEMENTATIONS, Implementation
from planner.throughput.kernel_stack import KernelStack
from planner.throughput.token_dispatch import HOST_WAIT_S
from planner.training_config import PipelineSchedule, Strategy, TrainingConfig

DATA_FILE = Path(__file__).resolve().parents[1] / "data" / "published_runs.yaml"
# The stacks we emit as their maintainers measured them (FSDP, ZeRO-3 + offload, the HF Trainer): same row format.
STACK_DATA_FILE = DATA_FILE.with_name("published_stack_runs.yaml")
# DeepSpeed's ZeRO papers on V100s (DDP, ZeRO-1/2, ZeRO-Offload, ZeRO-Infinity): held per stack
# (per_stack_accuracy.py), outside the held-out bounds of the two files above (the file's header says why).
ZERO_PAPERS_FILE = DATA_FILE.with_name("published_zero_papers.yaml")


@dataclass(frozen=True)
class Comparison:
    row: dict
    predicted_tflops: float  # in the paper's FLOP convention
    published_tflops: float
    peak_tflops: float
    bottlenecks: list[str]

    @property
    def error(self) -> float:
        """Signed relative error of the prediction."""
        return self.predicted_tflops / self.published_tflops - 1.0


def published_rows() -> list[dict]:
    return [row for path in (DATA_FILE, STACK_DATA_FILE) for row in yaml.safe_load(path.read_text())["runs"]]


def zero_paper_rows() -> list[dict]:
    return yaml.safe_load(ZERO_PAPERS_FILE.read_text())["runs"]


def _model(row: dict) -> ModelSpec:
    """A catalog model (rows of MoE or latent-attention models name one), the config.json fields a row quotes
    (`hf_config`: shapes the sizes below cannot say, such as a head_dim other than hidden / heads), or a decoder
    from the row's sizes."""
    if row.get("model"):  # `model: null` where a row inherits a catalog name but gives its own sizes
        return resolve_model(row["model"])
    if row.get("hf_config"):
        return spec_from_hf_config(row["hf_config"], name=row["id"], origin="dimensions", source="the row's hf_config")
    return spec_from_dimensions(
        hidden=row["hidden"],
        layers=row["layers"],
        heads=row["heads"],
        kv_heads=row.get("kv_heads"),
        ffn=row.get("ffn", 4 * row["hidden"]),
        vocab=row["vocab"],
        mlp=row.get("mlp", "standard"),
        max_positions=row["seq_len"],
    )


def data_parallel(row: dict) -> int:
    """Data-parallel replicas: what tp, pp and cp leave of the GPUs (ep is carved from them)."""
    return row["gpus"] // (row["tp"] * row["pp"] * row.get("cp", 1))


def plan_inputs(row: dict):
    """(ModelSpec, TrainingConfig, ClusterSpec) for a published run."""
    spec = _model(row)
    tp, pp, cp, gpus = row["tp"], row["pp"], row.get("cp", 1), row["gpus"]
    dp = data_parallel(row)
    micro_batch = row["micro_batch"]
    accum = row["global_batch"] // (dp * micro_batch)
    if dp * tp * pp * cp != gpus or accum * dp * micro_batch != row["global_batch"]:
        raise ValueError(f"{row['id']}: tp x pp x cp x dp or the batch split does not add up")
    config = TrainingConfig(
        strategy=Strategy(row.get("strategy", "engine")),
        zero_stage=row["zero_stage"],
        fsdp_sharding=row.get("fsdp_sharding", "full"),
        offload_optimizer=row.get("offload_optimizer", "none"),
        offload_params=row.get("offload_params", "none"),
        layout={
            "tp": tp,
            "pp": pp,
            "cp": cp,
            "ep": row.get("ep", 1),
            "virtual_stages": row.get("virtual_stages", 1),
            "stage_layers": row.get("stage_layers"),
        },
        fp8=row.get("fp8", False),
        zeropp=row.get("zeropp", False),
        kernels=row.get("kernels", "eager"),
        sequence_parallel=row.get("sequence_parallel", False),
        pipeline_schedule=PipelineSchedule(row.get("pipeline_schedule", "1f1b")),
        micro_batch=micro_batch,
        grad_accum=accum,
        seq_len=row["seq_len"],
        precision=row["precision"],
        activation_checkpointing=row["activation_checkpointing"],
        attention=row["attention"],
        optimizer=row.get("optimizer", "adamw"),
    ).with_stage_map(spec)  # as the planner estimates it: pp that does not divide the layers gets the default map
    gpus_per_node = row["gpus_per_node"]
    nodes = max(gpus // gpus_per_node, 1)
    cpu_ram = row.get("cpu_ram_gb")  # offload rows: the node's RAM as published
    nvme = {"nvme_gb": row.get("nvme_gb"), "nvme_gbps": row.get("nvme_gbps")}  # ZeRO-Infinity rows: NVMe per node
    if "inter_node_GBps_per_gpu" in row:
        cluster = make_cluster(
            row["gpu"],
            gpus_per_node,
            nodes,
            interconnect="ib-hdr" if nodes > 1 else None,
            inter_bw=row["inter_node_GBps_per_gpu"] if nodes > 1 else None,
            cpu_ram_gb=cpu_ram,
            **nvme,
        )
    else:
        cluster = make_cluster(
            row["gpu"],
            gpus_per_node,
            nodes,
            interconnect=row.get("interconnect") if nodes > 1 else None,
            cpu_ram_gb=cpu_ram,
            **nvme,
        )
    if "host_GBps_per_gpu" in row:  # each GPU's CPU-memory bandwidth as the source measured it (ZeRO-Infinity)
        cluster = cluster.model_copy(update={"host_GBps_per_gpu": row["host_GBps_per_gpu"]})
    return spec, config, cluster


def implementation_of(row: dict) -> Implementation:
    """The row's preset, with how its source says the stack exchanged context-parallel keys and values where
    that departs from the preset (Meta's Llama 3 stack all-gathered them: `context_exchange: all-gather`), and
    the kernel stack its code ran where that departs from the preset (BLOOM's ALiBi: `kernel_stack`), the
    activation checkpoints per block DeepSpeed moved to CPU memory (ZeRO-Infinity's example: `checkpoints_to_cpu`),
    DeepSpeed's BF16Optimizer where the row ran it (BLOOM: `bf16_optimizer`), and whether the version that ran
    compiled its loss under --compile where that departs from the preset (torchtitan's December 2024 tables did
    not: `compiled_loss: false`), and FlashAttention-2 where the row's code ran it in place of the preset's cuDNN
    (`attention_kernel: flash-attention-2`: the PyTorch/IBM blog's SDPA of 2024, torchtitan before 2025-10,
    cudnn-frontend's training benchmark pinning `SDPBackend.FLASH_ATTENTION`)."""
    preset = IMPLEMENTATIONS[row["implementation"]]
    if "context_exchange" in row:
        preset = dataclasses.replace(preset, overlaps_context_exchange=row["context_exchange"] == "ring")
    if "kernel_stack" in row:
        preset = dataclasses.replace(preset, kernels=KernelStack(row["kernel_stack"]))
    if "checkpoints_to_cpu" in row:  # DeepSpeed's cpu_checkpointing, as ZeRO-Infinity's example ran it
        memory = dataclasses.replace(preset.memory, checkpoints_to_cpu=row["checkpoints_to_cpu"])
        preset = dataclasses.replace(preset, memory=memory)
    if "token_dispatcher" in row:  # Megatron-Core's MoE dispatcher: the plain one waits on the host (token_dispatch.py)
        preset = dataclasses.replace(preset, dispatch_host_wait_s=HOST_WAIT_S[row["token_dispatcher"]])
    if row.get("bf16_optimizer"):  # DeepSpeed's BF16Optimizer (BLOOM): fp32 gradients all-reduced over dp
        preset = dataclasses.replace(preset, all_reduces_fp32_gradients=True)
    if "compiled_loss" in row:
        memory = dataclasses.replace(preset.memory, compiles_loss=row["compiled_loss"])
        preset = dataclasses.replace(preset, memory=memory)
    if "attention_kernel" in row:
        # FlashAttention-2 in place of the preset's kernel: Hopper's factor is FlashAttention-2's; on Blackwell it
        # runs its own measured curve, a third of cuDNN's (Implementation.attention_kernel).
        if row["attention_kernel"] != "flash-attention-2":
            raise ValueError(
                f"{row['id']}: attention_kernel {row['attention_kernel']!r}: only flash-attention-2 departs from a "
                "preset's kernel; leave the key out for the preset's own"
            )
        preset = dataclasses.replace(preset, runs_flash_attention_2=True)
    return preset


def compare(row: dict, implementation: Implementation | None = None) -> Comparison:
    """The row against its estimate under its own preset (implementation_of), or under `implementation` (start that
    from implementation_of(row): it carries the row's own kernel stack and optimizer switches)."""
    spec, config, cluster = plan_inputs(row)
    # Megatron-LM, Megatron-DeepSpeed and Meta's stack fuse their norms and rotary.
    estimate = estimate_throughput(spec, config, cluster, implementation=implementation or implementation_of(row))
    peak = estimate.tflops_per_gpu / estimate.mfu
    published = row["published"]
    if "seconds_per_step" in published:  # a step's wall time as printed: the same work in that time
        measured = estimate.tflops_per_gpu * estimate.step_time_s / published["seconds_per_step"]
        return Comparison(row, estimate.tflops_per_gpu, measured, peak, estimate.notes)
    if "tokens_per_s_per_gpu" in published:
        per_token_tflops = estimate.tflops_per_gpu / (estimate.tokens_per_s / estimate.world_size)
        return Comparison(
            row, estimate.tflops_per_gpu, published["tokens_per_s_per_gpu"] * per_token_tflops, peak, estimate.notes
        )
    if "mfu" in published:
        return Comparison(row, estimate.tflops_per_gpu, published["mfu"] * peak, peak, estimate.notes)
    if published["flop_convention"] == "params-8":
        # DeepSpeed's count: 8 x parameters x tokens (forward, backward and the recomputed forward; no attention
        # term), the flops_calculator of its Megatron-LM examples and the ZeRO-Infinity paper's Eq. 7.
        tokens_per_gpu = estimate.tokens_per_s / estimate.world_size
        predicted = 8.0 * spec.params.total * tokens_per_gpu / 1e12
        return Comparison(row, predicted, published["tflops_per_gpu"], peak, estimate.notes)
    if published["flop_convention"] == "neox-2022":
        # GPT-NeoX's counter from May 2021 to September 2023 (megatron/logging.py get_flops, read at its 20B release,
        # c560814b): per token 6 x the model's total parameters + 60 x seq x hidden x layers; no recomputed forward.
        tokens_per_gpu = estimate.tokens_per_s / estimate.world_size
        per_token = 6.0 * published["counted_params"] + 60.0 * row["seq_len"] * row["hidden"] * row["layers"]
        return Comparison(row, per_token * tokens_per_gpu / 1e12, published["tflops_per_gpu"], peak, estimate.notes)
    if published["flop_convention"] == "megatron-num-flops":
        # Megatron-LM's num_floating_point_operations (megatron/training/training.py at core_r0.8.0), per token:
        # 12 L h^2 ((1 + kv_heads / heads + s / h) + ffn / h + V / (2 L h)) for a GELU MLP without grouped queries:
        # model FLOPs, the full s x s attention, no recomputed forward.
        hidden, layers = row["hidden"], row["layers"]
        ratio = (
            2.0 + row["seq_len"] / hidden + row.get("ffn", 4 * hidden) / hidden + row["vocab"] / (2 * layers * hidden)
        )
        per_token = 12.0 * layers * hidden * hidden * ratio
        tokens_per_gpu = estimate.tokens_per_s / estimate.world_size
        return Comparison(row, per_token * tokens_per_gpu / 1e12, published["tflops_per_gpu"], peak, estimate.notes)
    predicted = estimate.hfu * peak if published["flop_convention"] == "hardware" else estimate.tflops_per_gpu
    return Comparison(row, predicted, published["tflops_per_gpu"], peak, estimate.notes)


def comparisons() -> list[Comparison]:
    return [compare(row) for row in published_rows()]


def zero_paper_comparisons() -> list[Comparison]:
    return [compare(row) for row in zero_paper_rows()]


def summary(results: list[Comparison]) -> dict[str, float]:
    counted = [abs(c.error) for c in results if c.row["statistics"]]
    signed = [c.error for c in results if c.row["statistics"]]
    return {
        "rows": len(counted),
        "median_abs_error": statistics.median(counted),
        "max_abs_error": max(counted),
        "median_signed_error": statistics.median(signed),
    }


def _layout(row: dict) -> str:
    extra = "".join(f" {key[0]}{row[key]}" for key in ("cp", "ep") if row.get(key, 1) > 1)
    virtual = f" v{row['virtual_stages']}" if row.get("virtual_stages", 1) > 1 else ""
    return f"t{row['tp']} p{row['pp']}{virtual}{extra} d{data_parallel(row)}"


def render(results: list[Comparison], markdown: bool, summary_line: bool = True) -> str:
    header = [
        "run",
        "GPU",
        "GPUs",
        "layout",
        "mb x accum",
        "published TFLOP/s",
        "predicted",
        "error",
        "published % peak",
        "in stats",
    ]
    lines = []
    if markdown:
        lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    else:
        lines.append(" ".join(f"{h:>18}" if i else f"{h:<30}" for i, h in enumerate(header)))
    for c in results:
        r = c.row
        dp = data_parallel(r)
        cells = [
            r["id"],
            r["gpu"],
            str(r["gpus"]),
            _layout(r),
            f"{r['micro_batch']} x {r['global_batch'] // (dp * r['micro_batch'])}",
            f"{c.published_tflops:.0f}",
            f"{c.predicted_tflops:.0f}",
            f"{c.error:+.1%}",
            f"{c.published_tflops / c.peak_tflops:.0%}",
            "yes" if r["statistics"] else "no (info)",
        ]
        if markdown:
            lines.append("| " + " | ".join(cells) + " |")
        else:
            lines.append(" ".join(f"{x:>18}" if i else f"{x:<30}" for i, x in enumerate(cells)))
    if summary_line:
        s = summary(results)
        lines.append("")
        lines.append(
            f"{s['rows']} rows in the statistics: median |error| {s['median_abs_error']:.1%}, "
            f"max |error| {s['max_abs_error']:.1%}, median signed error {s['median_signed_error']:+.1%}"
        )
    return "\n".join(lines)


def render_zero_papers(results: list[Comparison], markdown: bool) -> str:
    """DeepSpeed's ZeRO papers on V100s: the same table, summed up apart (held per stack, not by the bounds above)."""
    s = summary(results)
    return (
        render(results, markdown, summary_line=False)
        + f"\n\nDeepSpeed's ZeRO papers (V100): {s['rows']} counted rows, median |error| {s['median_abs_error']:.1%}, "
        f"max |error| {s['max_abs_error']:.1%} (held per stack: per_stack_accuracy.py)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", action="store_true", help="print the table for docs/accuracy.md")
    parser.add_argument("--verbose", action="store_true", help="also print each run's bottleneck notes")
    parser.add_argument("--smoke", action="store_true", help="print every output once: both tables and the notes")
    args = parser.parse_args(argv)
    results = comparisons()  # every row: the whole table takes under a second, so the smoke run keeps them all
    zero_papers = zero_paper_comparisons()
    for markdown in (False, True) if args.smoke else (args.markdown,):
        print(render(results, markdown))
        print()
        print(render_zero_papers(zero_papers, markdown))
    if args.verbose or args.smoke:
        for c in results + zero_papers:
            print(c.row["id"], "; ".join(c.bottlenecks) or "-")
    return 0


if __name__ == "__main__":
    sys.exit(main())
