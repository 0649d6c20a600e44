"""Gradient compression in the search: what a request may compress, and why a plan compresses or not.

`--compression int8|onebit` puts every engine candidate with a data-parallel reduction on that compression
(PlanRequest keeps the search to the engine); `auto` searches each engine layout with int8 gradients beside
the same layout without (engine_layouts.py; CompressionRequest.choices), and the ranking keeps the compressed one only
where it scores more than the estimate's error above the rest (a compressed layout counts as less simple:
explain.py's tie rule). auto never tries onebit: it is 1-bit Adam, another optimizer than the one asked for,
ZeRO-0 only, whose measured loss is not the uncompressed run's either way (planner/gradient_compression.py).
"""

from __future__ import annotations

from planner.contract.choices import GradientCompression
from planner.evaluate import Evaluation, evaluate
from planner.gradient_compression import MEASURED, applies_to, onebit_warning, wire_source
from planner.hardware.cluster import ClusterSpec
from planner.models.spec import ModelSpec
from planner.search.candidates import Scored
from planner.search.engine_layouts import engine_applicability
from planner.search.explain import TIE_TOLERANCE, objective_figure
from planner.search.request import CompressionRequest, PlanRequest
from planner.training_config import TrainingConfig


def check_compression_request(spec: ModelSpec, world_size: int | None, request: PlanRequest) -> None:
    """A pinned compression that no candidate could run: one line, before the search (world_size None: not
    checked against the GPU count)."""
    from planner.errors import UserInputError

    pinned = request.compression.pinned
    if pinned is None:
        return
    flag = f"--compression {pinned.value}"
    why = engine_applicability(spec) or ("LoRA runs on DDP, FSDP or DeepSpeed" if request.lora_rank else None)
    if why is not None:
        raise UserInputError(f"{flag} runs on our engine, which does not train {spec.name} here: {why}")
    if world_size == 1:
        raise UserInputError(f"{flag} compresses the data-parallel gradient reduction; 1 GPU has none: drop it")


def compression_lines(config: TrainingConfig, world_size: int) -> list[str]:
    """What a compressed plan compresses, with its source, and onebit's warning."""
    if config.compression is GradientCompression.NONE:
        return []
    ranks = config.zero_ranks(world_size)
    lines = [f"{applies_to(config.compression, config.zero_stage, ranks)} [{wire_source(config.compression)}]"]
    if config.compression is GradientCompression.ONEBIT:
        lines.append(onebit_warning())
    return lines


def auto_line(best: Scored, scored: list[Scored], request: PlanRequest, tokens: float) -> str | None:
    """Why `--compression auto` compressed the best plan or did not (None for other requests)."""
    if request.compression is not CompressionRequest.AUTO:
        return None
    source = f"[{wire_source(GradientCompression.INT8)}; onebit: measured, {MEASURED}]"
    never = "onebit (1-bit Adam, another optimizer: measured loss -45%) is never tried"
    compressed = [item for item in scored if item.config.compression is not GradientCompression.NONE]
    plain = [item for item in scored if item.config.compression is GradientCompression.NONE]
    if not compressed:
        return (
            "--compression auto: no engine candidate with data parallelism fits here, so none could take int8 "
            f"gradients; {never} {source}"
        )
    if best.config.compression is not GradientCompression.NONE:
        if not plain:
            return f"--compression auto: int8 gradients; no uncompressed candidate fits; {never} {source}"
        rival = max(plain, key=lambda item: item.score)
        dp_time = best.throughput.breakdown.data_parallel_comm_s
        return (
            f"--compression auto chose int8 gradients: {best.score / rival.score - 1:.0%} above the best "
            f"uncompressed plan ({rival.layout.family}, {objective_figure(rival, request, tokens)}), beyond the "
            f"estimate's {TIE_TOLERANCE:.0%} error; its data-parallel traffic takes {dp_time:.3g} s of each "
            f"{best.throughput.step_time_s:.3g} s step (int8 measured +0.2% loss); {never} {source}"
        )
    rival = max(compressed, key=lambda item: item.score)
    ratio = rival.score / best.score
    if ratio <= 1:
        verdict = f"{1 - ratio:.0%} below this plan: compressing does not pay here"
    else:
        verdict = (
            f"{ratio - 1:.1%} above it, inside the estimate's {TIE_TOLERANCE:.0%} error, and the uncompressed plan is "
            "simpler and exact"
        )
    return (
        f"--compression auto tried int8 gradients on {len(compressed)} engine candidates; the best "
        f"({rival.layout.family}, {objective_figure(rival, request, tokens)}) scores {verdict}; {never} {source}"
    )


def estimate_compressed(
    spec: ModelSpec, config: TrainingConfig, cluster: ClusterSpec, compression: CompressionRequest, **evaluation
) -> tuple[Evaluation, list[str]]:
    """`estimate --compression`: the config's evaluation with that compression, and the lines that say what is
    compressed; auto evaluates it with int8 and without, and keeps int8 where it fits and is faster beyond the
    estimate's error (the search's rule)."""
    if compression is CompressionRequest.NONE:
        return evaluate(spec, config, cluster, **evaluation), []
    trial = compression.pinned or GradientCompression.INT8
    compressed_config = TrainingConfig(**{**dict(config), "compression": trial})  # checked: the engine's only
    if compression is not CompressionRequest.AUTO:
        compressed = evaluate(spec, compressed_config, cluster, **evaluation)
        return compressed, compression_lines(compressed.config, cluster.world_size)
    plain = evaluate(spec, config, cluster, **evaluation)
    if compressed_config.zero_ranks(cluster.world_size) == 1:
        return plain, ["--compression auto: this layout has no data-parallel reduction to compress (one ZeRO rank)"]
    compressed = evaluate(spec, compressed_config, cluster, **evaluation)
    if plain.throughput is None or compressed.throughput is None:
        return plain, [f"--compression auto: no speed estimate to choose by ({plain.throughput_error})"]
    before, after = plain.throughput.step_time_s, compressed.throughput.step_time_s
    times = f"step {after:.3g} s with int8 gradients, {before:.3g} s without [{wire_source(trial)}]"
    if compressed.memory.fits and (after < before * (1 - TIE_TOLERANCE) or not plain.memory.fits):
        return compressed, [
            *compression_lines(compressed.config, cluster.world_size),
            f"--compression auto chose int8: {times}",
        ]
    why = (
        "does not fit"
        if not compressed.memory.fits
        else f"is not faster beyond the estimate's {TIE_TOLERANCE:.0%} error"
    )
    return plain, [f"--compression auto kept the gradients uncompressed: int8 {why} ({times})"]
