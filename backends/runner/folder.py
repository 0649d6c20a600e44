"""Read and check a run folder before anything trains: plan.json, engine.json, ds_config.json, accelerate YAML.

`load_run_folder` returns a RunSpec, or raises one UserInputError for the
first problem: a missing or older plan.json, an engine.json,
ds_config.json or accelerate_config.yaml that is not valid, a checkpoints
path that is a file, a model folder holding its weights only as a pickle
when the run's random init was not asked for. The same checks run in `hardware-selector train`
before torchrun starts, and in every rank of the runner.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from planner.contract.engine_config import EngineConfig, load_engine_config
from planner.contract.run_config import RunConfig
from planner.contract.schema import read_json_file
from planner.elastic_plan import ElasticPlan
from planner.errors import UserInputError
from planner.plan import Plan
from planner.rundir.engine_for_run import engine_config_for_run, zero_stage_of
from planner.rundir.manifest import interrupted_emission
from planner.rundir.plan_file import read_plan_file
from planner.rundir.replan import read_elastic
from planner.rundir.run_overrides import RunOverrides, apply_overrides, model_notes
from planner.training_config import Strategy


@dataclass(frozen=True)
class RunSpec:
    run_dir: Path
    plan: Plan
    run: RunConfig
    strategy: Strategy
    engine_file: EngineConfig | None  # engine.json, when the folder has one
    ds_config: dict | None  # ds_config.json, when the folder has one
    elastic: ElasticPlan | None = None  # plan.json's fallback layouts, for a folder emitted with --elastic
    notes: tuple[str, ...] = ()  # for rank 0 to print at the start


def load_run_folder(run_dir: Path, overrides: RunOverrides, strategy: str | None = None) -> RunSpec:
    if not run_dir.is_dir():
        raise UserInputError(f"{run_dir} is not a directory; pass the folder `hardware-selector plan --emit` wrote")
    if interrupted_emission(run_dir):
        raise UserInputError(
            f"{run_dir} was being re-emitted when it stopped, so its files may come from two plans; run the same "
            "`hardware-selector plan ... --emit` again (it finishes the swap), then train"
        )
    plan, run = read_plan_file(run_dir)
    run = apply_overrides(run, overrides)
    notes = model_notes(run.model)  # random weights (a pickle-only folder emitted before emit refused it: here)
    chosen = Strategy(strategy) if strategy else plan.config.strategy
    if chosen is not Strategy.ENGINE and run.layout.model_parallel > 1:
        raise UserInputError(
            f"this plan's layout {run.layout.describe()} splits the model over ranks, which only our "
            f"engine does; drop --strategy {chosen.value}, or re-emit a plan without tp/pp"
        )
    engine_file = load_engine_config(run_dir / "engine.json") if (run_dir / "engine.json").exists() else None
    ds_config = None
    if (run_dir / "ds_config.json").exists():
        ds_config = read_json_file(run_dir / "ds_config.json", "re-emit the run folder, or fix the file")
        if not isinstance(ds_config, dict):
            raise UserInputError(f"{run_dir / 'ds_config.json'} must hold a JSON object of DeepSpeed keys")
    if (run_dir / "accelerate_config.yaml").exists():
        _check_accelerate_yaml(run_dir / "accelerate_config.yaml")
    checkpoints = run_dir / "checkpoints"
    if checkpoints.exists() and not checkpoints.is_dir():
        raise UserInputError(f"{checkpoints} is a file; the runner keeps its checkpoints in that folder: move the file")
    if not os.access(run_dir, os.W_OK):
        raise UserInputError(f"{run_dir} is not writable; the run writes metrics.jsonl, checkpoints/ and final/ there")
    return RunSpec(
        run_dir=run_dir.resolve(),
        plan=plan,
        run=run,
        strategy=chosen,
        engine_file=engine_file,
        ds_config=ds_config if chosen is Strategy.DEEPSPEED else None,
        elastic=read_elastic(run_dir) if chosen is plan.config.strategy else None,
        notes=tuple(notes),
    )


ACCELERATE_KEYS = {"distributed_type": str, "num_processes": int, "num_machines": int}


def _check_accelerate_yaml(path: Path) -> None:
    """What launch.sh hands `accelerate launch --config_file`: readable YAML with the keys accelerate needs."""
    import yaml  # PyYAML: a dependency of accelerate and transformers

    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as failure:
        where = getattr(failure, "problem_mark", None)
        at = f" (line {where.line + 1})" if where is not None else ""
        raise UserInputError(f"{path} is not readable YAML{at}; re-emit the run folder, or fix the file") from None
    if not isinstance(document, dict):
        raise UserInputError(f"{path} must hold a mapping of accelerate settings; re-emit the run folder")
    for key, kind in ACCELERATE_KEYS.items():
        value = document.get(key)
        if not isinstance(value, kind) or isinstance(value, bool) or (kind is int and value < 1):
            wanted = "a positive whole number" if kind is int else "a string"
            raise UserInputError(f"{path}: {key} must be {wanted}, not {value!r}; re-emit the run folder")
    deepspeed = document.get("deepspeed_config")
    named = deepspeed.get("deepspeed_config_file") if isinstance(deepspeed, dict) else None
    if isinstance(named, str) and not (path.parent / named).is_file():  # launch.sh starts accelerate in the run folder
        raise UserInputError(f"{path} names deepspeed_config_file {named}, which is not in {path.parent}")


def engine_settings(spec: RunSpec, run: RunConfig) -> EngineConfig:
    """The settings the adapters share, for this (world-fitted) run; the learning rate is the runner's.

    Engine plans take engine.json (a user's edits to ZeRO, buckets or compression act), with the run's
    batch keys; its optimizer and clipping must agree with the run's."""
    overridden = {"strategy": spec.strategy}
    if spec.strategy in (Strategy.ENGINE, Strategy.DEEPSPEED):  # the plan's sharding as a ZeRO stage: an FSDP plan
        overridden["zero_stage"] = zero_stage_of(spec.plan)  # run by `--strategy engine` ran ZeRO-0 (an audit)
    derived = engine_config_for_run(
        spec.plan.model_copy(update={"config": spec.plan.config.model_copy(update=overridden)}), run
    )
    base = spec.engine_file if spec.strategy is Strategy.ENGINE and spec.engine_file is not None else derived
    if base is not derived:
        _check_agrees(base, derived)
        _check_same_layout(base, derived, spec.run)
    block = base.hardware_selector.model_copy(
        update={"layout": run.layout, "device": run.device, "dist_backend": run.dist_backend, "seq_len": run.seq_len}
    )
    return base.model_copy(
        update={
            "train_batch_size": run.global_batch,
            "train_micro_batch_size_per_gpu": run.micro_batch,
            "gradient_accumulation_steps": run.grad_accum,
            "scheduler": None,
            "hardware_selector": block,
        }
    )


def _check_same_layout(found: EngineConfig, expected: EngineConfig, folder_run: RunConfig) -> None:
    """The layout, the pipeline schedule and sequence parallelism are plan.json's: an engine.json edited to others
    was run at plan.json's layout with its own schedule, and the ranks aborted in gloo (an audit)."""
    ours, theirs = expected.hardware_selector, found.hardware_selector
    edits = []
    if theirs.layout != folder_run.layout:
        edits.append(f"layout {_layout_words(theirs.layout)} (plan.json's: {_layout_words(folder_run.layout)})")
    for key in ("pipeline_schedule", "sequence_parallel"):
        if getattr(theirs, key) != getattr(ours, key):
            edits.append(f"{key} {getattr(theirs, key)} (plan.json's: {getattr(ours, key)})")
    if edits:
        raise UserInputError(
            f"engine.json sets {'; '.join(edits)}: the layout is the plan's; re-plan for another one "
            "(`hardware-selector plan ... --emit`), or restore engine.json's hardware_selector block"
        )


def _layout_words(layout) -> str:
    stages = f", {layout.virtual_stages} virtual stages" if layout.virtual_stages > 1 else ""
    stage_map = f", stage layers {','.join(map(str, layout.stage_layers))}" if layout.stage_layers else ""
    return layout.describe() + stages + stage_map


def _check_agrees(found: EngineConfig, expected: EngineConfig) -> None:
    ours, theirs = expected.optimizer, found.optimizer
    for key in ("lr", "betas", "eps", "weight_decay"):
        if getattr(ours.params, key) != getattr(theirs.params, key) or ours.type != theirs.type:
            raise UserInputError(
                f"engine.json sets optimizer {key} {getattr(theirs.params, key)} but the run's is "
                f"{getattr(ours.params, key)}; change both, or pass the value with `train --lr ...`"
            )
    if found.gradient_clipping != expected.gradient_clipping:
        raise UserInputError(
            f"engine.json sets gradient_clipping {found.gradient_clipping} but the run's is "
            f"{expected.gradient_clipping}; make them agree"
        )
