"""Write a plan out as a self-contained run folder: derive its RunConfig and EngineConfig once, render each file
with planner/emit/, write them atomically.

    emit_run_folder(plan, "runs/llama", force=False, nproc_override=None, options=RunOptions(...)) -> [paths]

Which files a folder holds depends on the strategy (docs/emitted-files.md):
plan.json (the plan and its RunConfig), accelerate_config.yaml, launch.sh,
slurm.sbatch and README.md always; ds_config.json (+ the Trainer flavour,
hostfile) for DeepSpeed (the hostfile also on several nodes, for launch.sh's deepspeed branch); mpi_hostfile on several nodes or for --launcher mpi; training_args.json for what the HF Trainer runs;
engine.json for our engine; pytorchjob.yaml or skypilot.yaml for the launch
target that runs one (planner/launch_target.py). The folder's files are replaced all at once (every new
file staged whole first: planner/rundir/manifest.py); an existing folder is refused unless force=True, and then the state of a run trained
there (checkpoints, metrics, exports) is moved aside to previous/<time>/,
never deleted and never resumed under the new plan.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from planner.contract.choices import KernelChoice, Strategy
from planner.contract.run_config import RunConfig, SearchRestrictions
from planner.elastic_plan import ElasticPlan
from planner.emit.accelerate_yaml import accelerate_yaml
from planner.emit.deepspeed_json import deepspeed_config
from planner.emit.engine_json import engine_json
from planner.emit.launch_guards import mpi_hostfile
from planner.emit.launch_scripts import hostfile, launch_sh
from planner.emit.plan_json import plan_json
from planner.emit.pytorchjob import pytorchjob_yaml
from planner.emit.run_readme import run_readme
from planner.emit.skypilot_task import skypilot_yaml
from planner.emit.slurm import slurm_sbatch
from planner.emit.training_args import training_args_json_document
from planner.errors import UserInputError, spelled
from planner.files import write_text_atomic
from planner.launch_target import LaunchTarget, check_elastic
from planner.models.families import family_of
from planner.plan import Plan
from planner.rundir.data_bound import check_data_fills_a_step
from planner.rundir.data_sources import check_text_field_present
from planner.rundir.engine_for_run import engine_config_for_run
from planner.rundir.manifest import (
    MANIFEST,
    STAGING,
    commit_staged,
    files_of_ours,
    finish_emission,
    foreign_files,
    write_manifest,
)
from planner.rundir.previous_run import archive_previous_run
from planner.rundir.run_options import RunOptions, run_config
from planner.rundir.run_overrides import RunOverrides, apply_overrides, unloaded_weights_note
from planner.rundir.weight_headers import check_weight_headers

__all__ = ["RunOptions", "emit_run_folder", "render_run_folder", "run_config"]

# Every name an emission may write: with force=True, the ones this plan does not need are removed.
ARTIFACTS = (
    "plan.json",
    "ds_config.json",
    "ds_config_trainer.json",
    "accelerate_config.yaml",
    "training_args.json",
    "engine.json",
    "launch.sh",
    "hostfile",
    "mpi_hostfile",
    "slurm.sbatch",
    "pytorchjob.yaml",
    "skypilot.yaml",
    "README.md",
)
EXECUTABLES = {"launch.sh", "slurm.sbatch"}


def _json(document: dict | None) -> str | None:
    return None if document is None else json.dumps(document, indent=2) + "\n"


def render_run_folder(
    plan: Plan,
    run_dir: Path,
    target: RunConfig,
    tune: dict[str, Any] | None = None,
    elastic: ElasticPlan | None = None,
    launch: LaunchTarget | None = None,
) -> dict[str, str]:
    """File name -> content, without touching the disk."""
    deepspeed = plan.config.strategy is Strategy.DEEPSPEED
    engine = engine_config_for_run(plan, target)
    contents: dict[str, str | None] = {
        "plan.json": plan_json(plan, target, tune, elastic),
        "ds_config.json": _json(deepspeed_config(plan, engine)) if deepspeed else None,
        "ds_config_trainer.json": _json(deepspeed_config(plan, engine, trainer_flavour=True)) if deepspeed else None,
        "accelerate_config.yaml": accelerate_yaml(plan, target),
        "training_args.json": _json(training_args_json_document(plan, target)),
        "engine.json": engine_json(plan, engine),
        "launch.sh": launch_sh(plan, target, elastic=elastic),
        "hostfile": hostfile(plan, target),
        "mpi_hostfile": mpi_hostfile(target),
        "slurm.sbatch": slurm_sbatch(plan, target, elastic=elastic),
        "pytorchjob.yaml": (
            pytorchjob_yaml(plan, target, str(run_dir), launch, elastic)
            if launch is not None and launch.name == "k8s"
            else None
        ),
        "skypilot.yaml": (
            skypilot_yaml(plan, target, str(run_dir), launch)
            if launch is not None and launch.name == "skypilot"
            else None
        ),
    }
    files = {name: text for name, text in contents.items() if text is not None}
    placeholder = launch is not None and launch.name == "k8s" and not launch.image
    files["README.md"] = run_readme(plan, target, [*files, "README.md"], placeholder_image=placeholder)
    return files


def _not_split_over_tp(plan: Plan) -> str | None:
    """What of this model our engine's tp does not split, or None (a family with no plan at all: the launcher
    says so, naming ZeRO/FSDP)."""
    entry = family_of(plan.model.model_type)
    if entry is not None and entry.parallel_plan is not None and not entry.parallel_plan.tensor_parallel:
        return f"{plan.model.model_type} models"  # DeepSeek's plan pipelines it only
    if plan.model.is_moe and plan.model.dense_layers:
        return f"an MoE model with {plan.model.dense_layers} dense MLP layers"  # tp splits MoE blocks only
    return None


# The command line's flags for emit_run_folder's keywords (`plan --emit DIR --force`, `tune --emit DIR --force`).
CLI_NAMES: Mapping[str, str] = {"force": "--force"}


def emit_target(directory: str | Path, *, force: bool = False, names: Mapping[str, str] | None = None) -> Path:
    """The folder a run folder may be emitted into, resolved; one line when it is no such folder (checked before
    any work that would be lost to it: a search, a tune's trials). `names`: the asking command's flags (CLI_NAMES);
    without them the advice names the Python keyword (force=True)."""
    if not str(directory).strip():
        raise UserInputError("the run folder needs a name; an empty path would write into the current folder")
    run_dir = Path(directory).expanduser().resolve()
    if run_dir.exists() and not run_dir.is_dir():
        raise UserInputError(f"{run_dir} is a file; give a directory to emit the run folder into")
    if (run_dir / "config.json").is_file() and not (run_dir / "plan.json").exists():
        # A model's folder (its checkpoint, or the config being planned): --force would mix a run folder into it.
        raise UserInputError(
            f"{run_dir} holds a model (config.json), not a run folder; emit beside it, e.g. --emit runs/NAME, "
            "and keep the model folder as it is"
        )
    if run_dir.exists() and any(run_dir.iterdir()) and not force:
        overwrite = spelled(names or {}, "force", True)
        raise UserInputError(f"{run_dir} already exists; pass {overwrite} to overwrite it, or choose a new directory")
    return run_dir


def emit_run_folder(
    plan: Plan,
    directory: str | Path,
    *,
    force: bool = False,
    nproc_override: int | None = None,
    options: RunOptions | None = None,
    overrides: RunOverrides | None = None,
    tune: dict[str, Any] | None = None,
    elastic: ElasticPlan | None = None,
    launch: LaunchTarget | None = None,
    search: SearchRestrictions | None = None,
    keep_state: bool = False,
    names: Mapping[str, str] | None = None,
) -> list[Path]:
    """Write the run folder for `plan` into `directory`; returns the written paths.

    options: whole blocks of the run (data, hyperparameters, anomaly policy, ...) for Python callers;
    overrides: the run-option flags (planner/rundir/run_option_table.py), applied on top as `train` applies them;
    tune: the trials a `hardware-selector tune` measured (plan.json's "tune" block);
    elastic: the fallback layouts of an elastic run (planner/search/elastic.py), for plan.json and the launchers;
    launch: where the folder is launched (`--launcher`): launch.sh's default launcher and the target's own file;
    search: what the search that found the plan was kept to (the run block's `search`; `tune RUN_DIR` reads it);
    keep_state: a trained run's state stays where it is (`tune RUN_DIR` whose winner is the folder's own plan);
    names: how the asking command spells the keywords its errors name (CLI_NAMES), default the Python keywords.
    """
    if plan.model.modality != "text":
        kind = {"image": ("a vision", "image"), "audio": ("an audio", "audio"),
                "image-text": ("a multimodal", "image-text")}[plan.model.modality]  # fmt: skip
        raise UserInputError(
            f"{plan.model.name} is {kind[0]} model: it is planned here, but run folders train text models "
            f"(docs/models-and-hardware.md); use the plan's strategy in your own {kind[1]} pipeline"
        )
    entry = family_of(plan.model.model_type)
    if entry is not None and entry.emit_refusal:
        raise UserInputError(f"{plan.model.name} is planned, not emitted: {entry.emit_refusal}")
    layout = plan.config.layout
    if layout.cp > 1 and (layout.pp > 1 or layout.ep > 1):
        raise UserInputError(
            f"layout {layout.describe()}: our engine splits sequences over cp with pp and ep 1; plan with "
            "--pp 1 --ep 1, or run this layout with Megatron-LM or torchtitan"
        )
    unsplit = _not_split_over_tp(plan)
    if layout.tp > 1 and plan.config.strategy is Strategy.ENGINE and unsplit:
        raise UserInputError(
            f"layout {layout.describe()}: our engine does not split {unsplit} over tp; plan with --tp 1, or run this "
            "layout with Megatron-LM"
        )
    if plan.config.lora_rank:  # the runner and the doors train every weight: a folder would not train adapters
        adapters = "QLoRA" if plan.config.qlora else "LoRA"
        raise UserInputError(
            f"{adapters} is planned, not emitted: a run folder trains every weight (no adapters); train the adapters "
            f"with PEFT in your own training code at the plan's layout and batch (plan --json), or plan without "
            "--lora-rank to get a run folder for a full fine-tune"
        )
    if plan.config.fp8:
        raise UserInputError(
            "FP8 is planned, not emitted: run the plan's layout with Transformer Engine or torchao float8 in your "
            "own training code, or plan without --fp8 to get a run folder"
        )
    run_dir = emit_target(directory, force=force, names=names)
    target = run_config(plan, nproc_override, options)
    if overrides is not None:
        target = apply_overrides(target, overrides)
    if launch is not None:
        target = target.model_copy(update={"launcher": launch.launcher})
    if search is not None:
        target = target.model_copy(update={"search": search})
    unloaded_weights_note(target.model)  # training from random weights beside the user's checkpoint is never silent
    if target.model.init == "pretrained" and target.model.path:
        check_weight_headers(Path(target.model.path))  # a damaged checkpoint: one line here, not at train
    for patterns, flag in ((target.data.train, "--data"), (target.data.eval, "--eval-data")):
        check_text_field_present(patterns, flag, target.data.text_field)  # not first at train
    vocab_size = target.model.hf_config.get("vocab_size")
    if target.data.train and not target.data.synthetic and isinstance(vocab_size, int):
        from planner.rundir.tokenizer_check import load_checked_tokenizer

        tokenizer = load_checked_tokenizer(
            target.model.tokenizer_dir, model_name=target.model.name, vocab_size=vocab_size
        )
        # train cannot change the batch, and would refuse data too small for one step only after tokenizing it
        check_data_fills_a_step(
            target.data.train,
            tokenizer,
            global_batch=target.global_batch,
            seq_len=target.seq_len,
            data_parallel=target.data_parallel,
        )
    if plan.config.kernels is KernelChoice.LIGER and target.device != "cuda":
        raise UserInputError("--kernels liger: Liger's kernels are Triton GPU kernels; plan --kernels compile for CPU")
    if elastic is not None and launch is not None:
        check_elastic(launch.name)
    if elastic is not None and target.nproc_overridden:
        raise UserInputError("--elastic plans each node count's layout itself; drop --nproc")
    files = render_run_folder(
        plan, run_dir, target, tune, elastic, launch
    )  # everything is rendered before anything is written
    created = not run_dir.exists()
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise UserInputError(
            f"cannot create the run folder {run_dir}: {error.strerror or error}; give --emit a writable directory"
        ) from None
    finish_emission(run_dir)  # an earlier emission stopped mid-swap: completed first, so "ours" is its files
    staging = run_dir / STAGING
    try:  # all files whole in the staging folder first: Ctrl-C or a full disk here leaves the old folder as it was
        staging.mkdir()
        for name, text in files.items():
            write_text_atomic(staging / name, text, executable=name in EXECUTABLES)
        write_manifest(staging, files)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        if created:  # no empty folder that --emit would then refuse
            _remove_empty(run_dir)
        raise
    ours = files_of_ours(run_dir, ARTIFACTS)
    foreign = foreign_files(run_dir, files, ARTIFACTS)
    archive_previous_run(run_dir, also=foreign, state=not keep_state)  # the user's files: moved, kept
    commit_staged(run_dir, (set(ARTIFACTS) & ours) - set(files))  # stale: another strategy's files
    return [*(run_dir / name for name in files), run_dir / MANIFEST]


def _remove_empty(run_dir: Path) -> None:
    try:
        run_dir.rmdir()
    except OSError:
        pass  # something else was put there meanwhile: left as it is
