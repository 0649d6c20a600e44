"""The Python API of the tool this project replaces, answered by the strategy search (docs/selector.md).

    from hardware_selector import get_distributed_training_config
    config = get_distributed_training_config("text_generation", "facebook/opt-1.3b", gpu_count=8, batch_size=4,
                                             max_memory_gb=24)
    config["distributed_strategy"], config["plan"]  # "DDP", the typed Plan

Conventions:
- batch_size is the per-GPU batch; the effective batch is batch_size x gpu_count
  (training.py says what happens when it does not fit);
- max_memory_gb means "a GPU of that memory" (gpu_choice.py);
- the answer speaks the legacy vocabulary (legacy_dict.py); memory is in GiB.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, ClassVar

from planner.errors import UserInputError, spelled
from planner.hardware.cluster import ClusterSpec, check_nvme
from planner.hardware.gpus import load_gpu_catalog, resolve_gpu
from planner.hardware.memory_cap import gpu_label, memory_cap_gib
from planner.inference import InferenceRequest
from planner.inference.flags import ServingFlags
from planner.inference.request import KvFormat, ServingObjective, WeightFormat
from planner.limits import DEFAULT_HEADROOM
from planner.models.legacy_names import check_model_family, family_modality
from planner.models.resolve import resolve_model
from planner.models.spec import ModelSpec
from planner.plan import Plan
from planner.search import Objective
from planner.search.strategy_layout import family_label
from planner.search.suggest import SuggestionFlags
from planner.selector.arguments import SERVING_RULES, checked_arguments, choice_of
from planner.selector.calibration import calibration_for
from planner.selector.gpu_choice import DEFAULT_GPU, cluster_for, gpu_with_memory
from planner.selector.legacy_dict import STRATEGY_NAMES, TORCH_FSDP_SHARDING, no_fit_summary, plan_summary
from planner.selector.serving import API_SERVING_FLAGS, SELECT_SERVING_FLAGS, inference_answer
from planner.selector.training import API_FLAGS, Calibrated, default_seq_len, plan_training, strategy_kinds
from planner.training_config import Precision

if TYPE_CHECKING:  # annotations only: the selector never imports transformers until asked for arguments
    from transformers import TrainingArguments

__all__ = [
    "DEFAULT_GPU",
    "STRATEGY_NAMES",
    "TORCH_FSDP_SHARDING",
    "HardwareSelector",
    "cluster_for",
    "default_seq_len",
    "get_distributed_training_config",
    "get_inference_config",
    "gpu_with_memory",
    "plan_summary",
    "select_hardware_for_task",
]

# select_hardware_for_task's GPU count when distributed and none is given (its documented default).
DEFAULT_COMPARED_GPUS = 4


class HardwareSelector:
    """Plans training for a model: which strategy, batch split, precision, and which GPU."""

    # How an answer's suggestions name a change: this API's keyword arguments (the seed CLI's subclass: its flags).
    training_flags: ClassVar[SuggestionFlags] = API_FLAGS
    serving_flags: ClassVar[ServingFlags] = API_SERVING_FLAGS
    selection_serving_flags: ClassVar[ServingFlags] = SELECT_SERVING_FLAGS  # select_hardware_for_task's names
    # How errors name each argument (checked_arguments); a keyword not listed is named as it is spelled here.
    argument_names: ClassVar[dict[str, str]] = {}

    @checked_arguments()
    def __init__(self, seq_len: int | None = None, headroom_fraction: float = DEFAULT_HEADROOM) -> None:
        self.seq_len = seq_len  # None: the smaller of 2048 and the model's context
        self.headroom_fraction = float(headroom_fraction)

    def training_arguments(self, plan: Plan, output_dir: str, **overrides: Any) -> TrainingArguments:
        """A transformers.TrainingArguments that runs `plan` (planner/emit/training_args.py)."""
        from planner.rundir.training_arguments import training_arguments

        return training_arguments(plan, output_dir, **overrides)

    def _model(self, model_family: str, model_name: str | os.PathLike[str]) -> ModelSpec:
        families = check_model_family(model_family)  # both names checked by checked_arguments
        spec = resolve_model(
            os.fspath(model_name)
        )  # a Path to a model folder is a name too; legacy names resolve there
        if spec.family not in families or family_modality(model_family) != spec.modality:
            kind = {"image": "a vision ", "audio": "an audio ", "image-text": "a multimodal "}.get(spec.modality, "")
            raise UserInputError(f"{spec.name} is {kind}{spec.family.value}, not a '{model_family}' model; "
                                 f"check {spelled(self.argument_names, 'model_family')}")  # fmt: skip
        return spec

    def _seq_len(self, spec: ModelSpec, seq_len: int | None) -> int:
        chosen = seq_len or self.seq_len or default_seq_len(spec)
        if chosen > spec.max_position_embeddings and spec.position_embedding == "learned":
            flag = self.argument_names.get("seq_len")
            given = f"{flag} {{}}" if flag else "seq_len={}"
            raise UserInputError(
                f"{given.format(chosen)} exceeds {spec.name}'s {spec.max_position_embeddings} learned positions; "
                f"pass {given.format(spec.max_position_embeddings)} or less"
            )
        return chosen

    def _calibration(self, spec: ModelSpec, cluster: ClusterSpec, calibrate: bool, db: Any) -> Calibrated:
        names = self.argument_names
        return calibration_for(spec, cluster, calibrate=calibrate, db=db, db_named=names.get("db", "db="),
                               turned_off_by=names.get("calibrate", "calibrate=False"))  # fmt: skip

    def _memory_cap(self, cluster: ClusterSpec) -> dict[str, str]:
        """`gpu_memory_cap` when max_memory_gb capped the GPU below its memory: the answer's `gpu` is the catalog
        name, and this says the plan and its suggestions are for less ("V100-16GB capped at 2 GiB by
        max_memory_gb")."""
        if memory_cap_gib(cluster.gpu) is None:
            return {}
        return {"gpu_memory_cap": f"{gpu_label(cluster.gpu)} by {spelled(self.argument_names, 'max_memory_gb')}"}

    @checked_arguments()
    def get_distributed_training_config(
        self,
        model_family: str,
        model_name: str | os.PathLike[str],
        gpu_count: int,
        batch_size: int | None = None,
        max_memory_gb: float | None = None,
        *,
        gpu: str | None = None,
        gpus_per_node: int | None = None,
        seq_len: int | None = None,
        objective: str = "throughput",
        precision: str | None = None,
        allow_engine: bool = False,
        strategies: list[str] | None = None,
        nvme_gb: float | None = None,
        nvme_gbps: float | None = None,
        calibrate: bool = True,
        db: str | os.PathLike[str] | None = None,
    ) -> dict[str, Any]:
        """The best plan for `batch_size` sequences per GPU on gpu_count GPUs: the legacy dict plus the Plan.

        Arguments are checked first (arguments.py): a wrong type is a TypeError, a bad value a ValueError, each
        naming it.

        `strategies` (e.g. ["FSDP"]) limits the answer to the stacks you run. `nvme_gb` (GiB of NVMe per node)
        lets the answer offload to NVMe (ZeRO-Infinity); `nvme_gbps` is that NVMe's read/write GB/s per node
        (default: an assumed 6, named in the answer's sources).

        The benchmark database's measured runs calibrate the throughput, as they do `hardware-selector plan`'s
        (`db`: its path, default $HARDWARE_SELECTOR_DB or the cache dir; `calibrate=False`: the analytical figures
        only); `calibration` says how, in plan's words.
        """
        names = self.argument_names
        check_nvme(nvme_gb, nvme_gbps, (names.get("nvme_gb", "nvme_gb"), names.get("nvme_gbps", "nvme_gbps")))
        spec = self._model(model_family, model_name)
        cluster = cluster_for(
            gpu_with_memory(max_memory_gb, gpu, names),
            gpu_count,
            gpus_per_node,
            nvme_gb=nvme_gb,
            nvme_gbps=nvme_gbps,
            names=names,
        )
        calibrated = self._calibration(spec, cluster, calibrate, db)
        answer = plan_training(
            spec,
            cluster,
            batch_size,
            allow_engine=allow_engine,
            strategies=strategy_kinds(strategies) if strategies is not None else None,
            flags=self.training_flags,
            calibrated=calibrated,
            seq_len=self._seq_len(spec, seq_len),
            headroom_fraction=self.headroom_fraction,
            objective=choice_of("objective", Objective, objective),
            precision=choice_of("precision", Precision, precision) if precision else None,
        )
        result = answer.result
        if result.best is None:
            return {
                **no_fit_summary(result, cluster),
                "requested_per_gpu_batch_size": batch_size,
                "calibration": calibrated[1],
                **self._memory_cap(cluster),
            }
        summary = plan_summary(result.best) | self._memory_cap(cluster)
        summary["requested_per_gpu_batch_size"] = batch_size
        summary["calibration"] = result.best.calibration  # as it holds for this plan, as plan says it
        summary.update(answer.notes)
        summary["alternatives"] = {
            family_label(plan.config): plan_summary(plan)["estimated_memory"]["per_gpu_gb"]
            for plan in result.candidates[1:]
        }
        summary["rejected"] = dict(result.rejected)
        return summary

    @checked_arguments(**SERVING_RULES)
    def get_inference_config(
        self,
        model_family: str,
        model_name: str | os.PathLike[str],
        gpu_count: int = 1,
        batch_size: int = 1,
        max_memory_gb: float | None = None,
        *,
        gpu: str | None = None,
        gpus_per_node: int | None = None,
        context: int | None = None,
        output_tokens: int | None = None,
        weights: str = "bf16",
        kv_cache: str = "bf16",
        objective: str = "throughput",
    ) -> dict[str, Any]:
        """The best serving layout for `batch_size` concurrent requests on gpu_count GPUs (docs/inference.md)."""
        spec = self._model(model_family, model_name)
        cluster = cluster_for(
            gpu_with_memory(max_memory_gb, gpu, self.argument_names),
            gpu_count,
            gpus_per_node,
            names=self.argument_names,
        )
        request = InferenceRequest.for_model(
            spec,
            batch=batch_size,
            context=context,
            output=output_tokens,
            weights=choice_of("weights", WeightFormat, weights),
            kv_cache=choice_of("kv_cache", KvFormat, kv_cache),
            objective=choice_of("objective", ServingObjective, objective),
            headroom_fraction=self.headroom_fraction,
        )
        return inference_answer(spec, cluster, request, self.serving_flags) | self._memory_cap(cluster)

    @checked_arguments()
    def select_hardware_for_task(
        self,
        model_family: str,
        model_name: str | os.PathLike[str],
        task_type: str = "training",
        batch_size: int = 8,
        distributed: bool = True,
        gpu_count: int | None = None,
        *,
        max_memory_gb: float | None = None,
        seq_len: int | None = None,
        rank_by: str = "cost",
        include_detected: bool = True,
        candidates: list[str] | None = None,
        allow_engine: bool = False,
        calibrate: bool = True,
        db: str | os.PathLike[str] | None = None,
    ) -> dict[str, Any]:
        """Compare catalog GPUs (and this machine's) for the task; rank by cost per token or throughput.

        For task_type="inference", batch_size is the number of concurrent requests and seq_len the prompt length.
        Training throughput is calibrated per GPU as get_distributed_training_config's (`calibrate`, `db`).
        gpu_count: the GPUs compared (default 4); distributed=False compares one, and refuses another count.
        """
        if not distributed and gpu_count not in (None, 1):  # it was dropped without a word (an audit)
            raise UserInputError(
                f"select_hardware_for_task(): gpu_count={gpu_count} needs distributed=True (distributed=False "
                "compares one GPU)"
            )
        task, rank_by = task_type.strip().lower(), rank_by.strip().lower()
        spec = self._model(model_family, model_name)
        length = self._seq_len(spec, seq_len) if task == "training" else seq_len
        count = (DEFAULT_COMPARED_GPUS if gpu_count is None else gpu_count) if distributed else 1
        gpus = (
            [resolve_gpu(name) for name in candidates]
            if candidates
            else [g for g in load_gpu_catalog() if g.kind == "gpu"]
        )
        if max_memory_gb is not None:
            gpus = [g for g in gpus if g.memory_gib <= max_memory_gb * 1.05]
        detected = _detected_gpu_names() if include_detected else []
        gpus += [resolve_gpu(name) for name in detected if all(g.name != name for g in gpus)]
        if not gpus:  # max_memory_gb left none: not "no catalog GPU fits", as if the model were too big
            raise UserInputError(
                f"no {'candidate' if candidates else 'catalog'} GPU has max_memory_gb {max_memory_gb:g} or less; "
                "raise max_memory_gb" + (" or name larger candidates" if candidates else "")
            )
        estimates: dict[str, Any] = {}
        ranked = []
        for entry in gpus:
            # This method takes no gpus_per_node: its errors do not advise one (a long-time user's audit).
            cluster = cluster_for(entry, count, names={"gpu_count": "gpu_count"})
            if task == "inference":
                request = InferenceRequest.for_model(
                    spec, batch=batch_size, context=length, headroom_fraction=self.headroom_fraction
                )
                try:
                    summary = inference_answer(spec, cluster, request, self.selection_serving_flags)
                except UserInputError as error:  # e.g. no bf16 on this GPU: not a candidate
                    estimates[entry.name] = {"fits": False, "gpu": entry.name, "why": str(error)}
                    continue
                summary["detected_on_this_machine"] = entry.name in detected
                estimates[entry.name] = summary
                if summary["fits"]:
                    ranked.append(summary)
                continue
            calibrated = self._calibration(spec, cluster, calibrate, db)
            answer = plan_training(
                spec,
                cluster,
                batch_size,
                allow_engine=allow_engine,
                flags=self.training_flags,
                calibrated=calibrated,
                seq_len=length,
                headroom_fraction=self.headroom_fraction,
                top_k=1,
            )
            best = answer.result.best
            if best is None:
                estimates[entry.name] = {**no_fit_summary(answer.result, cluster), "calibration": calibrated[1]}
                continue
            summary = {**plan_summary(best), **answer.notes, "calibration": best.calibration}
            speed = best.throughput
            price = cluster.gpu.price_usd_per_hour  # the cluster's: several nodes rent as whole servers
            summary["usd_per_million_tokens"] = (
                price * count / 3600 / speed.tokens_per_s * 1e6 if speed and price is not None else None
            )
            summary["usd_per_gpu_hour"], summary["price_source"] = price, cluster.gpu.price_note()
            summary["detected_on_this_machine"] = entry.name in detected
            estimates[entry.name] = summary
            ranked.append(summary)
        if not ranked:
            reasons = {str(summary.get("why")) for summary in estimates.values() if summary.get("why")}
            which = "candidate" if candidates else "catalog"
            if len(reasons) == 1 and len(estimates) == len(gpus):  # the same refusal on every GPU: more won't help
                raise UserInputError(f"no {which} GPU fits {model_name}: {reasons.pop()}")
            raise UserInputError(f"no {which} GPU fits {model_name} at {count} GPUs; raise gpu_count")

        def tokens_per_s(summary: dict) -> float:
            return summary.get("estimated_throughput", {}).get("tokens_per_s", 0.0)

        priced = rank_by == "cost" and any(summary["usd_per_million_tokens"] is not None for summary in ranked)
        if priced:  # the unpriced after the priced, and each group fastest first (a tie is no order)
            ranked.sort(
                key=lambda s: (
                    s["usd_per_million_tokens"] is None,
                    s["usd_per_million_tokens"] or 0.0,
                    -tokens_per_s(s),
                )
            )
        else:
            ranked.sort(key=lambda s: -tokens_per_s(s))
        primary = ranked[0]
        return {
            "primary_recommendation": primary,
            "distributed_strategy": primary["distributed_strategy"],
            "gpu_count": count,
            "fallback_options": ranked[1:4],
            "estimates": estimates,
            "ranked_by": "USD per million tokens (catalog prices)"
            if priced
            else "tokens/s" + (" (no GPU here has a catalog price to rank by cost)" if rank_by == "cost" else ""),
            "detected_gpus": detected,
        }


def _detected_gpu_names() -> list[str]:
    from planner.hardware.detect import detect_hardware

    report = detect_hardware()
    return sorted({gpu.catalog_name for gpu in report.gpus if gpu.catalog_name})


def get_distributed_training_config(
    model_family: str,
    model_name: str | os.PathLike[str],
    gpu_count: int,
    batch_size: int | None = None,
    max_memory_gb: float | None = None,
    **options: Any,
) -> dict[str, Any]:
    return HardwareSelector().get_distributed_training_config(
        model_family, model_name, gpu_count, batch_size, max_memory_gb, **options
    )


def get_inference_config(
    model_family: str, model_name: str | os.PathLike[str], gpu_count: int = 1, **options: Any
) -> dict[str, Any]:
    return HardwareSelector().get_inference_config(model_family, model_name, gpu_count, **options)


def select_hardware_for_task(model_family: str, model_name: str | os.PathLike[str], **options: Any) -> dict[str, Any]:
    return HardwareSelector().select_hardware_for_task(model_family, model_name, **options)
