"""Change a RunConfig for one run: the flags of `train` and of the runner (data, weights, length, lr, ...).

`plan --emit` bakes these choices into plan.json; `hardware-selector train
DIR --data other.txt --steps 100` changes them for one run without
re-emitting. Every override is validated the way the emitter validates it
(paths that exist, numbers in range), so both doors give the same one-line
errors.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from planner.contract.run_config import AnomalyAction, Init, ModelSource, RunConfig, TextUnit
from planner.contract.schema import describe_validation_error
from planner.errors import UserInputError
from planner.rundir.data_sources import check_text_field_applies, resolve_sources
from planner.rundir.run_option_table import RUN_OPTIONS, SETS

WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model")


class RunOverrides(BaseModel):
    """None leaves the run's own value."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    data: list[str] | None = None
    eval_data: list[str] | None = None
    text_field: str | None = None
    text_unit: TextUnit | None = None
    eval_fraction: float | None = None
    eval_every: int | None = None
    tokenizer: str | None = None
    init: Init | None = None
    steps: int | None = None
    epochs: float | None = None
    learning_rate: float | None = None
    warmup_steps: int | None = None
    seed: int | None = None
    save_every: int | None = None
    keep_last: int | None = None
    export_every: int | None = None
    resume: bool | None = None
    on_non_finite: AnomalyAction | None = None
    on_loss_spike: str | None = None  # ACTION or ACTION:FACTOR
    on_grad_spike: str | None = None


def has_weights(folder: Path | None) -> bool:
    return folder is not None and any((folder / name).is_file() for name in WEIGHT_FILES)


def unloaded_weights(folder: Path | None) -> list[str]:
    """The weight files of a folder without model.safetensors or its index, none of which is ever loaded:
    pickles (pytorch_model*.bin: unpickling runs code), safetensors shards whose index was left behind, and
    safetensors under another name (an adapter's adapter_model.safetensors is not a model)."""
    if folder is None or has_weights(folder) or not folder.is_dir():
        return []
    return sorted(
        path.name
        for path in folder.iterdir()
        if path.suffix == ".safetensors" or (path.name.startswith("pytorch_model") and path.suffix == ".bin")
    )


def _unloaded_why(folder: str, name: str) -> str:
    """Why `name` in `folder` is not loaded, and what would load it."""
    if name.endswith(".bin"):
        return (
            f"{folder} holds its weights only as {name} (a pickle, never loaded here: unpickling runs code), so "
            "this run would start from random weights; convert them to safetensors (save_pretrained(DIR, "
            "safe_serialization=True) where you trust the file)"
        )
    if "-of-" in name:  # model-00001-of-00002.safetensors: transformers' shards, found through their index
        return (
            f"{folder} holds {name} but not model.safetensors.index.json, the index its shards are found by, so "
            "this run would start from random weights; copy the index beside the shards"
        )
    return (
        f"{folder} holds {name} but no model.safetensors (nor its index), so this run would start from random "
        "weights; point --model at the folder save_pretrained wrote the whole model to"
    )


def unloaded_weights_note(model: ModelSource) -> str | None:
    """Refuse a run that would train from random weights beside weights it does not load (unloaded_weights),
    unless --init random asked for it (at emit or at train); then the note that says so. A local folder with no
    weight file at all starts from random weights too: legitimate (a pretraining planned from a config.json),
    but said, since a fine-tune whose weights were never copied looks the same. None when the run loads weights,
    or was not planned from a folder (docs/running.md, "Weights")."""
    if model.init != "random" or not model.path:
        return None
    unloaded = unloaded_weights(Path(model.path))
    if not unloaded:
        if model.init_explicit or not Path(model.path).is_dir():
            return None
        return (
            f"note: {model.path} holds no weights (no model.safetensors), so the run starts from random weights; "
            "copy the checkpoint's weights there to fine-tune it, or pass --init random to say so"
        )
    if not model.init_explicit:  # emitted before emit refused it, or plan.json edited
        raise UserInputError(
            f"{_unloaded_why(model.path or '', unloaded[0])}, or pass --init random to train from scratch"
        )
    return f"note: training from random weights as --init random asks; {model.path}'s {unloaded[0]} is not loaded"


def custom_code_note(model: ModelSource) -> str | None:
    """A config.json that names its own modeling code (auto_map) trains as transformers' own class of its
    model_type: the code is never run (trust_remote_code stays False), so what it changes is not trained. Said at
    emit and at train, never silent (a new user's audit, 2026-11-30); None when the config names none."""
    auto_map = model.hf_config.get("auto_map")
    if not auto_map:
        return None
    values = auto_map.values() if isinstance(auto_map, dict) else [auto_map]
    # A tokenizer's entry is a pair (slow, fast), either of them null.
    flat = [item for value in values for item in (value if isinstance(value, (list, tuple)) else [value])]
    named = ", ".join(sorted({str(item) for item in flat if item}))
    return (
        f"note: {model.path or model.name}'s config.json names its own modeling code ({named}); it is never run "
        f"(remote code stays off), so the run trains transformers' own '{model.hf_config.get('model_type')}' "
        "model: layers or changes of that code are not in it"
    )


def model_notes(model: ModelSource) -> list[str]:
    """What `plan --emit` and `train` say of the model the run will train (random weights, ignored custom code)."""
    return [note for note in (unloaded_weights_note(model), custom_code_note(model)) if note]


def has_tokenizer(folder: Path | None) -> bool:
    return folder is not None and any((folder / name).is_file() for name in TOKENIZER_FILES)


def resolve_data_paths(patterns: list[str], flag: str) -> list[str]:
    """Each pattern as an absolute path or glob, read as train reads it (data_sources.py): one that matches
    nothing, a file type train cannot read (.csv) or files of several kinds is a one-line error now."""
    if patterns:  # none: synthetic data, or no separate evaluation set
        resolve_sources(patterns, flag)
    return [str(Path(pattern).expanduser().absolute()) for pattern in patterns]


def tokenizer_folder(path: str) -> str:
    folder = Path(path).expanduser().resolve()
    if not has_tokenizer(folder):
        raise UserInputError(
            f"--tokenizer {path}: no tokenizer files there (tokenizer.json or tokenizer_config.json); "
            "point at a folder written by tokenizer.save_pretrained"
        )
    return str(folder)


def apply_overrides(run: RunConfig, overrides: RunOverrides) -> RunConfig:
    check_finite(overrides)
    document = run.model_dump(mode="json")
    data, optim, checkpoint, model = document["data"], document["optim"], document["checkpoint"], document["model"]
    if overrides.data is not None:
        data["train"] = resolve_data_paths(overrides.data, "--data")
    if overrides.eval_data is not None:
        data["eval"] = resolve_data_paths(overrides.eval_data, "--eval-data")
    for key, value in (
        ("text_field", overrides.text_field),
        ("text_unit", overrides.text_unit),
        ("eval_fraction", overrides.eval_fraction),
        ("eval_every", overrides.eval_every),
    ):
        if value is not None:
            data[key] = value
    if overrides.text_field is not None:
        check_text_field_applies(data["train"] + data["eval"], overrides.text_field)
    if overrides.seed is not None:
        data["seed"] = optim["seed"] = overrides.seed
    if overrides.tokenizer is not None:
        model["tokenizer"] = tokenizer_folder(overrides.tokenizer)
    if overrides.init is not None:
        if overrides.init == "pretrained" and not has_weights(Path(model["path"]) if model["path"] else None):
            raise UserInputError(
                f"--init pretrained: {model['name']} has no local weights (model.safetensors); "
                "emit the plan with --model DIR of an HF checkpoint, or use --init random"
            )
        model["init"], model["init_explicit"] = overrides.init, True
    if overrides.steps is not None and overrides.epochs is not None:
        raise UserInputError("--steps and --epochs both say how long to train; give one of them")
    if overrides.steps is not None:
        optim["max_steps"] = overrides.steps
    if overrides.epochs is not None:
        optim["epochs"], optim["max_steps"] = overrides.epochs, None
    for key, value in (("learning_rate", overrides.learning_rate), ("warmup_steps", overrides.warmup_steps)):
        if value is not None:
            optim[key] = value
    if overrides.steps is not None or overrides.warmup_steps is not None:
        _check_warmup_fits(optim["warmup_steps"], optim["max_steps"], steps_given=overrides.steps is not None)
    for key, value in (
        ("every", overrides.save_every),
        ("keep_last", overrides.keep_last),
        ("export_every", overrides.export_every),
        ("resume", overrides.resume),
    ):
        if value is not None:
            checkpoint[key] = value
    anomaly = document["anomaly"]
    if overrides.on_non_finite is not None:
        anomaly["non_finite"] = overrides.on_non_finite
    for key, value, flag in (
        ("loss_spike", overrides.on_loss_spike, "--on-loss-spike"),
        ("grad_norm_spike", overrides.on_grad_spike, "--on-grad-spike"),
    ):
        if value is not None:
            anomaly[key].update(spike_rule(value, flag))
    _check_model_folder_exists(model, reads_text=bool(data["train"]))
    tokenizer = model["tokenizer"] or model["path"]
    if data["train"] and not has_tokenizer(Path(tokenizer) if tokenizer else None):
        where = f"{tokenizer} holds no tokenizer" if tokenizer else f"{model['name']} has no local model folder"
        raise UserInputError(
            f"--data needs the model's tokenizer and {where}; pass --tokenizer DIR (a folder written "
            "by tokenizer.save_pretrained)"
        )
    try:
        return RunConfig.model_validate(document)
    except ValidationError as error:
        raise _in_flags(error, overrides) from None


def _check_model_folder_exists(model: dict[str, Any], *, reads_text: bool) -> None:
    """The model folder plan.json names, moved or deleted since the run was emitted, is said as such: the
    messages for a folder without a tokenizer or weights led, followed, to --init random, a fine-tune turned
    into a run from scratch. Not needed (no error) when neither its weights nor its tokenizer are read."""
    path = model["path"]
    if not path or Path(path).is_dir():
        return
    if model["init"] == "pretrained" or (reads_text and not model["tokenizer"]):
        raise UserInputError(
            f"{path}, the model folder this run was emitted from (plan.json), does not exist (moved or deleted "
            "since); put it back, or emit the run again from where it is now (plan --model DIR ... --emit)"
        )


def check_finite(overrides: RunOverrides) -> None:
    """NaN fails every range check of pydantic, which then names the range (`--lr nan`: "<= 10"): say what it is."""
    for option in RUN_OPTIONS:
        value = getattr(overrides, option.key)
        if isinstance(value, float) and not math.isfinite(value):
            what = "not a number" if math.isnan(value) else "not a finite number"
            raise UserInputError(f"{option.flag} {value}: {value} is {what}; give {option.flag} a finite number")


def _check_warmup_fits(warmup: int | None, steps: int | None, *, steps_given: bool) -> None:
    if warmup is None or steps is None or warmup <= steps:
        return
    whose = "--steps" if steps_given else "the run's --steps"
    raise UserInputError(
        f"--warmup-steps {warmup} is more than {whose} {steps}: the learning rate would still be warming up when "
        f"the run ends; give --warmup-steps {steps} or fewer"
    )


def _in_flags(error: ValidationError, overrides: RunOverrides) -> UserInputError:
    """A RunConfig field's error in the words of the flag the user typed (`--steps`, not `optim.max_steps`)."""
    first = error.errors()[0]
    where = ".".join(str(part) for part in first["loc"][:2])
    given = [
        option
        for option in RUN_OPTIONS
        if where in SETS[option.key].split("|") and getattr(overrides, option.key) is not None
    ]
    if not given or first["type"] == "extra_forbidden":
        return UserInputError(f"run option {describe_validation_error(error, 'docs/running.md')}")
    option, value = given[0], getattr(overrides, given[0].key)
    problem = str(first["msg"]).removeprefix("Value error, ").replace("Input should be ", "")
    return UserInputError(f"{option.flag} must be {problem}, not {f'{value:g}' if isinstance(value, float) else value}")


def spike_rule(text: str, flag: str) -> dict[str, Any]:
    """ "warn", "skip-step:3" or "stop:10" -> the SpikeRule fields it sets."""
    action, _, factor = text.partition(":")
    if action not in ("warn", "skip-step", "stop"):
        raise UserInputError(f"{flag} {text!r}: the action must be warn, skip-step or stop (optionally :FACTOR)")
    if not factor:
        return {"action": action}
    try:
        value = float(factor)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):  # nan failed the range check as "must be at most 1000000"
        raise UserInputError(f"{flag} {text!r}: the factor after ':' must be a number above 1")
    return {"action": action, "factor": value}


def overrides_from(values: dict[str, Any]) -> RunOverrides:
    """RunOverrides from parsed flags (None and absent alike mean: keep)."""
    try:
        return RunOverrides(**{key: value for key, value in values.items() if value is not None})
    except ValidationError as error:
        raise UserInputError(f"option {describe_validation_error(error, 'docs/running.md')}") from None
