"""The runner's checkpoints: every adapter's state in one sealed folder per step, and resuming from the newest.

    RUN_DIR/checkpoints/global_step<N>/    the adapter's state (engine shards, DCP, or DeepSpeed's files)
                                           rng/rank<r>.pt, runner_state.json, MANIFEST.json (written last)
    RUN_DIR/checkpoints/latest             the newest sealed tag

The layout, sealing and newest-intact fallback are the engine's own
(backends/checkpoint/layout.py), so a crash mid-save never leaves a folder
that looks complete, and a damaged one is skipped for the one before it.
runner_state.json holds where the data stream stands, the anomaly averages
and what the checkpoint was saved under (model, strategy, batch), so a resume
continues the same run or refuses in one line.
"""

from __future__ import annotations

import hashlib
import json
import shlex
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from backends.checkpoint.layout import committed_tags, read_json
from backends.checkpoint.load import choose_checkpoint, rank0_choice
from backends.checkpoint.save import begin_partial, seal
from backends.checkpoint.shards import load_rng, save_rng
from backends.ranks import rank
from backends.runner.disk_space import CheckpointSpaceError, folder_bytes, out_of_space
from planner.errors import UserInputError

if TYPE_CHECKING:
    from backends.adapters.base import Adapter
    from planner.contract.run_config import DataConfig

RUNNER_STATE = "runner_state.json"
TRAINER_STATE = "trainer_state.json"  # what the HF Trainer saves in each checkpoint-<N> (the --trainer door)


def model_fingerprint(hf_config: dict, *, tiny: bool = False) -> str:
    """A short hash of the model's config: the same architecture and shapes give the same value (a --tiny run
    trains a shrunken model, marked as such)."""
    digest = hashlib.sha256(json.dumps(hf_config, sort_keys=True).encode()).hexdigest()[:16]
    return digest + ("-tiny" if tiny else "")


# The settings data_identity's "read" lists, in its order, as the flags name them (a refusal names what changed).
# The last two came later: a checkpoint saved before them has the first five, and is compared on those.
READ_SETTINGS = (
    "--text-field", "--text-unit", "--eval-data", "--eval-fraction", "--seed", "data.eval_max_blocks (run.json)",
    "--seq-len",
)  # fmt: skip


def data_identity(data: DataConfig, seq_len: int) -> dict[str, Any]:
    """What a checkpoint's data position counts in: the training files (each path and size) and how they are
    read and split; another value means the saved position points into other data. The position counts blocks
    of seq_len tokens, and the held-out split (at most eval_max_blocks of them) decides which are trained on."""
    if data.synthetic:
        return {"data": "synthetic tokens"}
    from planner.rundir.data_sources import resolve_sources

    files = [[str(path), path.stat().st_size] for source in resolve_sources(data.train) for path in source.files()]
    return {
        "data": ", ".join(data.train),
        "files": files,
        "read": [
            data.text_field,
            data.text_unit,
            data.eval,
            data.eval_fraction,
            data.seed,
            data.eval_max_blocks,
            seq_len,
        ],
    }


def check_data_position(state: dict[str, Any], *, folder: Path, data: dict[str, Any], reset: bool) -> str | None:
    """The note to print when the checkpoint's data position is of other data than this run's and
    --reset-data-position asks to read the new data from its start (the caller starts at sample 0); refused in
    one line without it (never resumed silently); None when the data are the same."""
    saved = state.get("saved_under", {}).get("data")
    if saved is None:  # a checkpoint from before data were recorded: nothing to compare
        return None
    if "read" in saved and "read" in data:  # an older checkpoint recorded fewer settings: compare those it has
        data = {**data, "read": data["read"][: len(saved["read"])]}
    if saved == data:
        return None
    then, now = saved.get("data"), data.get("data")
    if reset:
        return (
            f"note: --reset-data-position: reading {now} from its start; the checkpoint stood at sample "
            f"{state.get('samples', '?')} of {then}"
        )
    if then != now:
        changed = f"this run trains on {now}"
    elif saved.get("files") != data.get("files"):
        changed = f"{then} has changed since (its files or their sizes)"
    else:
        settings = [
            name
            for name, before, after in zip(READ_SETTINGS, saved.get("read", []), data.get("read", []), strict=False)
            if before != after
        ]
        changed = f"this run reads it with another {', '.join(settings) or 'reading'} setting"
    raise UserInputError(
        f"{folder} stands at sample {state.get('samples', '?')} of {then}, and {changed}, where that position "
        "means nothing; pass --reset-data-position to keep the weights and optimizer and read this data from its "
        "start, or --no-resume to start afresh (the checkpoint is kept)"
    )


def resume_folder(value: Path, run_dir: Path) -> Path | None:
    """--resume-from's folder, resolved, or None. A relative path is looked up from the working folder, then from
    the run folder: docs/running.md's `--resume-from checkpoints/global_step<N>` names the run's own checkpoint
    wherever `train` or launch.sh is typed (the ranks work from the caller's folder: `train`'s, or launch.sh's
    --launch-dir, backends/runner/launch_dir.py)."""
    path = Path(value).expanduser()
    candidates = [path] if path.is_absolute() else [Path.cwd() / path, run_dir / path]
    return next((candidate.resolve() for candidate in candidates if candidate.is_dir()), None)


def not_found_where(value: Path, run_dir: Path) -> str:
    return "" if Path(value).expanduser().is_absolute() else f" (looked for here and in {run_dir})"


def resume_path(value: Path, run_dir: Path) -> Path:
    """--resume-from's runner checkpoint folder (resume_folder), which must hold the runner's state."""
    chosen = resume_folder(value, run_dir)
    if chosen is not None:
        if (chosen / TRAINER_STATE).is_file() and not (chosen / RUNNER_STATE).is_file():
            raise UserInputError(
                f"--resume-from {value}: a checkpoint of the HF Trainer door (its {TRAINER_STATE}); add --trainer "
                "to resume it through the Trainer"
            )
        if not (chosen / RUNNER_STATE).is_file():
            raise UserInputError(
                f"--resume-from {value}: not a checkpoint of the runner (no {RUNNER_STATE}); name a "
                "checkpoints/global_step<N> folder"
            )
        return chosen
    where = not_found_where(value, run_dir)
    raise UserInputError(f"--resume-from {value}: no such folder{where}; name a checkpoints/global_step<N> folder")


def full_run_under_smoke_test(run_dir: Path, checkpoint: Path) -> str:
    """A --tiny smoke test in a folder whose newest checkpoint is a full run's: refused before the shrunken model
    is checked against it ("another model") or, started afresh, moves the full run aside for good (a new user's
    audit, 2026-11-30). Said by `train`'s checks and by the ranks (launch.sh)."""
    copy = f"cp -r {shlex.quote(str(run_dir))} {shlex.quote(f'{run_dir}-smoke')}"
    return (
        f"{run_dir} holds a full run's checkpoint ({checkpoint.name}), which a --tiny smoke test cannot resume "
        f"(and with --no-resume would set aside): smoke-test a copy of the folder ({copy}) or a fresh --emit; "
        "`train` without --tiny resumes this one"
    )


def saved_by_a_smoke_test(state: dict[str, Any]) -> bool:
    """A --tiny run's checkpoint (its fingerprint is marked so): the full run that follows the smoke test in the
    same folder starts afresh and moves it to previous/<time>/, instead of refusing it as another model's."""
    return str(state.get("saved_under", {}).get("model_fingerprint", "")).endswith("-tiny")


class RunCheckpoints:
    def __init__(self, folder: Path, keep_last: int):
        self.folder = folder
        self.keep_last = keep_last
        self.passed_over_smoke_test = False  # rank 0: newest() left a --tiny run's checkpoint for a full run

    def save(self, adapter: Adapter, step: int, state: dict[str, Any]) -> Path:
        """Collective: write and seal checkpoint `global_step<step>`; returns its folder.

        A disk that fills up mid-save ends in CheckpointSpaceError (which names the folder, the space the
        save needs and the intact checkpoint the run can resume from); the half-written folder is removed."""
        tag = f"global_step{step}"
        newest = committed_tags(self.folder)
        try:
            return self._save(adapter, tag, state)
        except BaseException as failure:  # DCP's CheckpointException is a BaseException
            needed = folder_bytes(self.folder / newest[-1]) if newest else None
            if isinstance(failure, (KeyboardInterrupt, SystemExit)) or not out_of_space(failure, self.folder, needed):
                raise
            shutil.rmtree(self.folder / f".partial-{tag}", ignore_errors=True)  # give the space back
            raise CheckpointSpaceError(self.folder, tag, needed, newest[-1] if newest else None) from failure

    def _save(self, adapter: Adapter, tag: str, state: dict[str, Any]) -> Path:
        partial = begin_partial(self.folder, tag)
        adapter.save(partial)
        save_rng(partial / "rng" / f"rank{rank()}.pt")
        if rank() == 0:
            (partial / RUNNER_STATE).write_text(json.dumps({**state, "tag": tag}, indent=1), encoding="utf-8")
        seal(self.folder, partial, tag, self.keep_last)
        return self.folder / tag

    def newest(self, resume_from: Path | None = None, *, tiny: bool = True) -> Path | None:
        """Collective: the newest intact checkpoint (rank 0 decides for everybody), or None; `resume_from`
        (--resume-from) names one instead, here or in another run folder. A full run (`tiny` False) does not
        resume a --tiny smoke test's checkpoint: None, and `passed_over_smoke_test` says why."""
        if resume_from is not None:
            return resume_path(resume_from, self.folder.parent)
        error: str | None = None
        choice: Path | None = None
        if rank() == 0:
            try:
                choice, self.passed_over_smoke_test = chosen_checkpoint(self.folder, tiny=tiny)
                if choice is not None and tiny and not _smoke_test_checkpoint(choice):
                    raise UserInputError(full_run_under_smoke_test(self.folder.parent, choice))
            except UserInputError as failure:
                error = str(failure)
        error, choice = rank0_choice(error, choice)
        if error:
            raise UserInputError(error)
        return choice

    @staticmethod
    def runner_state(folder: Path) -> dict[str, Any]:
        return read_json(folder / RUNNER_STATE)

    def load(self, adapter: Adapter, folder: Path) -> dict[str, Any]:
        """Collective: the adapter's state from `folder`, this rank's RNG; returns the runner state."""
        state = read_json(folder / RUNNER_STATE)
        adapter.load(folder)
        rng_file = folder / "rng" / f"rank{rank()}.pt"
        if rng_file.is_file():
            load_rng(rng_file)
        return state


def chosen_checkpoint(folder: Path, *, tiny: bool, report: bool = True) -> tuple[Path | None, bool]:
    """Rank 0's choice of the checkpoint a run resumes from, and whether it passed over a smoke test's: the
    newest intact one (an older one when the newer fail their manifest check, each said unless `report` is
    False; a UserInputError when none is intact), None for none; a full run (`tiny` False) passes over a --tiny
    smoke test's. An interrupted `train` says where the next one resumes with it too (status.next_start), so
    the line and the ranks cannot disagree."""
    choice = choose_checkpoint(folder, None, report=report)
    if choice is not None and not tiny and _smoke_test_checkpoint(choice):
        return None, True
    return choice, False


def _smoke_test_checkpoint(folder: Path) -> bool:
    try:
        return saved_by_a_smoke_test(read_json(folder / RUNNER_STATE))
    except (OSError, ValueError):
        return False  # a damaged state: resuming says what is wrong with it


def check_resumable(
    state: dict[str, Any],
    *,
    folder: Path,
    model_name: str,
    fingerprint: str,
    strategy: str,
    here: Path | None = None,
    digest: str | None = None,
    explicit: bool = False,
    data: dict[str, Any] | None = None,
    reset_data: bool = False,
    steps: int | None = None,
) -> str | None:
    """A checkpoint of another model or strategy is refused in one line (never resumed silently); so is one
    copied in from another run folder under another plan.json, unless --resume-from names it (`explicit`), and
    one already past the run's `steps` (--steps counts from the run's start: `train DIR --steps 10` on a
    checkpoint at step 300 would otherwise train nothing and say nothing).
    A plan.json edited in place (new anomaly rules, say) keeps its folder, and resumes with a note. With `data`
    (data_identity), a checkpoint of other data is refused too, or with `reset_data` its note returned."""
    saved = state.get("saved_under", {})
    if saved.get("model_fingerprint") != fingerprint:
        other = saved.get("model", "another model")
        what = f"another {other} (its config.json differs)" if other == model_name else other
        raise UserInputError(
            f"{folder} holds a checkpoint of {what}, not of this plan's {model_name}; "
            f"start afresh with --no-resume (the checkpoint is kept)"
        )
    saved_dir = saved.get("run_dir")
    if (
        not explicit
        and here is not None
        and saved_dir
        and Path(saved_dir) != here
        and saved.get("plan_digest") != digest
    ):
        raise UserInputError(
            f"{folder} was saved by another run folder ({saved_dir}) under another plan.json; to continue that run "
            f"here, pass --resume-from {folder}; or start afresh with --no-resume (the checkpoint is kept)"
        )
    if saved.get("strategy") != strategy:
        # With --resume-from, --no-resume is refused beside it: the way to start afresh is to drop it (an audit).
        afresh = f"drop --resume-from {folder}" if explicit else "start afresh with --no-resume"
        raise UserInputError(
            f"{folder} was saved by strategy {saved.get('strategy')}, and this run uses {strategy}; "
            f"resume with --strategy {saved.get('strategy')}, or {afresh}"
        )
    at = int(state.get("step", 0))
    if steps is not None and at > steps:
        raise UserInputError(
            f"{folder} is at step {at}, past this run's {steps} steps (--steps counts from the run's start, not "
            f"from the checkpoint); give --steps above {at} to train on from it, or --no-resume to start afresh "
            "(the checkpoint is kept)"
        )
    # The data last: a --reset-data-position note only for a checkpoint that is otherwise this run's.
    return None if data is None else check_data_position(state, folder=folder, data=data, reset=reset_data)


def saved_under(saved: dict[str, Any], digest: str, run_dir: Path) -> str:
    """Which plan.json a checkpoint was saved under, as the resume note says it: this one, an earlier one of this
    folder, or another folder's (--resume-from names one; "an earlier plan.json" said an audit's was this one's)."""
    if saved.get("plan_digest") == digest:
        return "this plan.json"
    other = saved.get("run_dir")
    return "an earlier plan.json" if other in (None, str(run_dir)) else f"{other}'s plan.json"
