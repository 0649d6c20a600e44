"""`plan`'s options for the training search: batch, sequence, precision, strategies, objective and the rest.

One option group (hardware_selector_cli/option_groups.py): `search_options(...)` reads the flags into a
SearchOptions, which says which of them were given (serving refuses them) and builds the PlanRequest.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import typer

from planner.contract.choices import (
    DEFAULT_SEARCHED_CHECKPOINTING,
    ActivationCheckpointing,
    FsdpSharding,
    KernelChoice,
    OptimizerKind,
    Precision,
)
from planner.errors import UserInputError
from planner.limits import DEFAULT_HEADROOM

from .estimate import IMPLEMENTATION_HELP
from .training_options import COMPRESSION_HELP, _choice

if TYPE_CHECKING:
    from planner.expert_routing import ExpertRouting

ALL_STRATEGIES = "ddp,fsdp,deepspeed,engine"  # zero1, zero2, zero3: DeepSpeed at that stage only
ALL_AC = ",".join(mode.value for mode in DEFAULT_SEARCHED_CHECKPOINTING)  # "none,selective,full"; op: opt-in


def _listed(value: str, enum_type, flag: str) -> tuple:
    items = [part.strip() for part in value.split(",") if part.strip()]
    return tuple(dict.fromkeys(_choice(item, enum_type, flag) for item in items))


@dataclass
class SearchOptions:
    global_batch: int | None
    micro_batch: int | None
    seq_len: int | None
    precision: str | None
    optimizer: str
    ac: str
    strategies: str
    fsdp_sharding: str | None
    no_offload: bool
    implementation: str
    lora_rank: int
    qlora: bool
    fp8: bool
    kernels: str
    compression: str
    zeropp: bool
    objective: str
    top: int
    headroom: float
    tokens: float | None

    def training_flags_given(self, *, routing_default: bool, emitting: bool) -> list[str]:
        """The flags that only a training plan reads (serving refuses them), with the routing flags and --emit."""
        given = {
            "--global-batch": self.global_batch is not None,
            "--micro-batch": self.micro_batch is not None,
            "--seq-len": self.seq_len is not None,
            "--precision": self.precision is not None,
            "--ac": self.ac != ALL_AC,
            "--strategies": self.strategies != ALL_STRATEGIES,
            "--fsdp-sharding": self.fsdp_sharding is not None,
            "--no-offload": self.no_offload,
            "--lora-rank": bool(self.lora_rank),
            "--qlora": self.qlora,
            "--fp8": self.fp8,
            "--kernels": self.kernels != "eager",
            "--compression": self.compression != "none",
            "--zeropp": self.zeropp,
            "--expert-capacity/--expert-imbalance": not routing_default,
            "--tokens": self.tokens is not None,
            "--emit": emitting,
        }
        return [flag for flag, set_ in given.items() if set_]

    def check(self, *, emitting: bool) -> None:
        """Every number in range and the implementation known, before any work (one line each)."""
        from planner.limits import MAX_BATCH, MAX_SEQ_LEN, MAX_TOKENS, check_count, check_number
        from planner.throughput.implementation import implementation_named

        if not 0 <= self.headroom < 1:
            raise UserInputError(f"--headroom must be in [0, 1), not {self.headroom}")
        for flag, value, high in (
            ("--top", self.top, 1000),
            ("--seq-len", self.seq_len, MAX_SEQ_LEN),
            ("--global-batch", self.global_batch, MAX_BATCH),
            ("--micro-batch", self.micro_batch, MAX_BATCH),
        ):
            if value is not None:
                check_count(flag, value, high=high)
        if self.tokens is not None:
            check_number("--tokens", self.tokens, high=MAX_TOKENS, low=0.0, low_inclusive=False)
        implementation_named(self.implementation)
        if self.compression.strip().lower() != "none" and self.implementation.strip().lower() != "ours":
            raise UserInputError(
                f"--compression {self.compression} plans our engine's compressed gradients, and --implementation "
                f"{self.implementation} predicts another codebase's speed: drop one of them"
            )
        if emitting and self.implementation.strip().lower() != "ours":
            raise UserInputError(
                f"--implementation {self.implementation} predicts another codebase's speed, and --emit writes "
                "configs for our stacks: drop one of them"
            )

    def request(self, seq_len: int, routing: ExpertRouting):
        from planner.search import Objective, PlanRequest
        from planner.search.request import CompressionRequest, pin_fsdp_sharding, search_strategy_names

        strategies = search_strategy_names([n.strip() for n in self.strategies.split(",") if n.strip()], "--strategies")
        if self.fsdp_sharding is not None:  # narrows the search as --strategies fsdp-full (say) does
            sharding = _choice(self.fsdp_sharding, FsdpSharding, "--fsdp-sharding")
            strategies = pin_fsdp_sharding(("fsdp",) if self.strategies == ALL_STRATEGIES else strategies, sharding)
        strategies = self._implementation_runs(strategies)
        compression = _choice(self.compression, CompressionRequest, "--compression")
        strategies = self._compressing(compression, strategies)
        return PlanRequest(
            seq_len=seq_len,
            global_batch=self.global_batch,
            micro_batch=self.micro_batch,
            precision=_choice(self.precision, Precision, "--precision") if self.precision else None,
            optimizer=_choice(self.optimizer, OptimizerKind, "--optimizer"),
            activation_checkpointing=_listed(self.ac, ActivationCheckpointing, "--ac"),
            strategies=strategies,
            implementation=self.implementation.strip().lower(),
            allow_offload=not self.no_offload,
            lora_rank=self.lora_rank,
            qlora=self.qlora,
            fp8=self.fp8,
            kernels=_choice(self.kernels, KernelChoice, "--kernels"),
            compression=compression,
            zeropp=self.zeropp,
            routing=routing,
            objective=_choice(self.objective, Objective, "--objective"),
            top_k=self.top,
            headroom_fraction=self.headroom,
            train_tokens=self.tokens,
        )

    def _compressing(self, compression, strategies: tuple[str, ...]) -> tuple[str, ...]:
        """--compression int8|onebit keeps the search to the engine, the one strategy that compresses, when
        --strategies was not given (PlanRequest refuses other kinds named beside it); auto needs the engine among
        the strategies searched."""
        from planner.search.request import CompressionRequest

        if compression.pinned is not None and self.strategies == ALL_STRATEGIES and self.fsdp_sharding is None:
            return ("engine",)
        if compression is CompressionRequest.AUTO and "engine" not in strategies:
            raise UserInputError(
                f"--compression auto tries int8 gradients on our engine's candidates, and --strategies "
                f"{self.strategies} searches none: add engine to --strategies, or drop --compression"
            )
        return strategies

    def _implementation_runs(self, strategies: tuple[str, ...]) -> tuple[str, ...]:
        """Under --implementation, the strategies that codebase trains with: all of them when --strategies was not
        given, and a one-line error for those named that it does not (estimate refuses the same pairs)."""
        from planner.contract.choices import STRATEGY_ALIASES
        from planner.throughput.implementation import check_implementation_runs, implementation_named

        preset = implementation_named(self.implementation)
        kept = tuple(name for name in strategies if STRATEGY_ALIASES[name]["strategy"] in preset.strategies)
        if self.strategies != ALL_STRATEGIES:
            for name in strategies:
                check_implementation_runs(self.implementation, STRATEGY_ALIASES[name]["strategy"])  # type: ignore[arg-type]
        return kept or strategies


def search_options(
    global_batch: int | None = typer.Option(
        None, "--global-batch", help="Sequences per optimizer step (micro × accum × dp)."
    ),
    micro_batch: int | None = typer.Option(
        None, "--micro-batch", help="Sequences per GPU per micro-step (default: searched)."
    ),
    seq_len: int | None = typer.Option(
        None, "--seq-len", help="Tokens per sequence (default: the smaller of 2048 and the model's context)."
    ),
    precision: str | None = typer.Option(
        None, "--precision", help="fp32|fp16-mixed|bf16-mixed|bf16 (default: best the GPU has)."
    ),
    optimizer: str = typer.Option("adamw", "--optimizer", help="adamw|adamw-8bit|adafactor|sgd|lion"),
    ac: str = typer.Option(
        ALL_AC, "--ac", help="Activation checkpointing modes to consider (none, selective, op, full)."
    ),
    strategies: str = typer.Option(
        ALL_STRATEGIES,
        "--strategies",
        help="Strategy kinds to consider: ddp,fsdp,deepspeed,engine; zero1|zero2|zero3 for DeepSpeed at that stage, "
        "fsdp-full|fsdp-grad-op|fsdp-hybrid|fsdp-no-shard for FSDP with that sharding.",
    ),
    fsdp_sharding: str | None = typer.Option(
        None,
        "--fsdp-sharding",
        help="full|grad-op|hybrid|none (or no-shard): plan FSDP with this sharding only, as --strategies fsdp-full "
        "(say) does; the pin holds through --emit. Not with other --strategies.",
    ),
    no_offload: bool = typer.Option(False, "--no-offload", help="Leave out CPU/NVMe offload."),
    implementation: str = typer.Option("ours", "--implementation", help=IMPLEMENTATION_HELP),
    lora_rank: int = typer.Option(
        0,
        "--lora-rank",
        help="Train LoRA adapters of this rank (0 = full fine-tuning); planned only: plan --emit refuses it.",
    ),
    qlora: bool = typer.Option(False, "--qlora", help="LoRA on a 4-bit NF4 base."),
    fp8: bool = typer.Option(False, "--fp8", help="FP8 block matmuls (planned only; needs an FP8 GPU)."),
    kernels: str = typer.Option("eager", "--kernels", help="eager|compile|liger: the blocks' element-wise kernels."),
    compression: str = typer.Option("none", "--compression", help=COMPRESSION_HELP),
    zeropp: bool = typer.Option(
        False,
        "--zeropp",
        help="Also plan DeepSpeed's ZeRO++ on ZeRO-3 (int8 forward gathers, backward gathers inside the node, "
        "int4 gradients): for clusters whose network paces ZeRO-3 (docs/search.md, ZeRO++).",
    ),
    objective: str = typer.Option(
        "throughput", "--objective", help="throughput|cost|time-to-train (inference: throughput|latency)"
    ),
    top: int = typer.Option(5, "--top", help="How many plans to show (best of each strategy family)."),
    headroom: float = typer.Option(DEFAULT_HEADROOM, "--headroom", help="Share of GPU memory kept free."),
    tokens: float | None = typer.Option(
        None, "--tokens", help="Training tokens for cost and time (default: 20 per parameter)."
    ),
) -> SearchOptions:
    return SearchOptions(
        global_batch=global_batch,
        micro_batch=micro_batch,
        seq_len=seq_len,
        precision=precision,
        optimizer=optimizer,
        ac=ac,
        strategies=strategies,
        fsdp_sharding=fsdp_sharding,
        no_offload=no_offload,
        implementation=implementation,
        lora_rank=lora_rank,
        qlora=qlora,
        fp8=fp8,
        kernels=kernels,
        compression=compression,
        zeropp=zeropp,
        objective=objective,
        top=top,
        headroom=headroom,
        tokens=tokens,
    )
