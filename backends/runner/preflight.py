"""Check a run's data, tokenizer and weights in the launching process, before any rank starts.

`hardware-selector train` calls this after reading the folder: a missing or
empty corpus, a missing text field, a data file that is not what its
extension says (a .jsonl line that is not JSON, a .parquet without its magic
bytes: backends/data/file_checks.py), a tokenizer that does not fit the
model, weights that do not fit config.json and a checkpoint to resume of
another model or strategy are each one line and exit code 2 within seconds,
instead of after torchrun has started every rank. It reads only what it
must: every line of a JSON-lines file (unless a token cache of the run was
written from it since it last changed), a parquet file's ends and footer,
the first document of each source (all of them only when they are empty),
the tokenizer's files and the safetensors headers.
The ranks check the same again, for runs started by launch.sh or sbatch.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from planner.contract.run_config import RunConfig
from planner.errors import UserInputError

if TYPE_CHECKING:
    from torch import nn


def check_data(run: RunConfig, vocab_size: int, run_dir: Path | None = None) -> None:
    from backends.data.documents import iter_documents
    from backends.data.file_checks import check_source
    from backends.data.prepare import load_tokenizer
    from backends.data.token_cache import sources_read_before
    from planner.rundir.data_sources import gone_from_run_folder, no_text_message, resolve_sources

    if run.data.synthetic:
        return
    load_tokenizer(run.model.tokenizer_dir, model_name=run.model.name, vocab_size=vocab_size)
    read = sources_read_before(run_dir / "data", run.data.text_field) if run_dir is not None else set()
    for patterns, flag in ((run.data.train, "--data"), (run.data.eval, "--eval-data")):
        if not patterns:
            continue
        # A --data given to `train` was checked as the run was overridden (run_overrides.py): what names nothing
        # here came from plan.json, and the line says so.
        gone = gone_from_run_folder(run_dir, patterns, flag) if run_dir is not None else None
        if gone:
            raise UserInputError(gone)
        sources = resolve_sources(patterns, flag)
        for source in sources:
            if source.path not in read:  # every line of a .jsonl, the ends and footer of a .parquet
                check_source(source.path, source.kind, run.data.text_field)
        if not any(
            texts for texts in iter_documents(sources, text_field=run.data.text_field, text_unit=run.data.text_unit)
        ):
            raise UserInputError(no_text_message(", ".join(patterns), sources))


def check_weights(run: RunConfig, model: nn.Module) -> None:
    from backends.weights.source import source_for

    source = source_for(model, run.model.path)
    for name, param in model.named_parameters():
        source.check_shape(name, tuple(param.shape))


def preflight(run: RunConfig, *, tiny: bool, run_dir: Path | None = None) -> None:
    """Raise the first problem as a UserInputError (imports transformers; call it where a run is about to start).

    run_dir: the folder whose token caches tell which data files were read whole already."""
    from backends.weights.model_init import build_model

    keep_vocab = not run.data.synthetic
    model = build_model(run.model, tiny=tiny, empty=True, keep_vocab=keep_vocab)
    if run.layout.tp > 1 or run.layout.pp > 1:
        from backends.decoder_anatomy import architecture_of

        architecture_of(model)  # tensor and pipeline parallelism know only some decoder families
    check_data(run, int(model.config.vocab_size), run_dir)
    if run.model.init == "pretrained" and not tiny:
        check_weights(run, model)


def check_resume(
    run_dir: Path,
    run: RunConfig,
    *,
    tiny: bool,
    strategy: str,
    resume_from: Path | None = None,
    reset_data_position: bool = False,
) -> Path | None:
    """The newest sealed checkpoint's runner state against this run (model, strategy and data), as the ranks
    check it after choosing the checkpoint. Only the small JSON is read: the ranks verify the checksums.
    Returns the checkpoint the run resumes from; None when it starts afresh (or the ranks choose among damaged
    ones)."""
    from backends.checkpoint.layout import read_json
    from backends.checkpoint.load import preferred_tags
    from backends.runner.checkpoints import (
        RUNNER_STATE,
        check_resumable,
        data_identity,
        full_run_under_smoke_test,
        model_fingerprint,
        resume_path,
        saved_by_a_smoke_test,
    )
    from backends.runner.world import TINY_SEQ_LEN

    folder = run_dir / "checkpoints"
    tags = preferred_tags(folder) if run.checkpoint.resume else []
    if resume_from is not None and run.checkpoint.resume:
        newest = resume_path(resume_from, run_dir)
    elif not tags:
        return None
    else:
        newest = folder / tags[0]
    try:
        state = read_json(newest / RUNNER_STATE)
    except (OSError, ValueError):
        return None  # a damaged checkpoint: the ranks fall back to an older one, or say why none is usable
    if resume_from is None and not tiny and saved_by_a_smoke_test(state):
        return None  # the smoke test's: the ranks start afresh and move it aside
    if resume_from is None and tiny and not saved_by_a_smoke_test(state):
        # A full run's checkpoint: a smoke test would be refused as "another model" (the shrunken one), and with
        # --no-resume would move the full run aside, its checkpoints never resumed again (a new user's audit).
        raise UserInputError(full_run_under_smoke_test(run_dir, newest))
    fingerprint = model_fingerprint(run.model.hf_config, tiny=tiny)
    from planner.rundir.replan import plan_digest

    check_resumable(
        state,
        folder=newest,
        model_name=run.model.name,
        fingerprint=fingerprint,
        strategy=strategy,
        here=run_dir.resolve(),
        digest=plan_digest(run_dir),
        explicit=resume_from is not None,
        data=data_identity(run.data, min(run.seq_len, TINY_SEQ_LEN) if tiny else run.seq_len),  # as the ranks cut it
        reset_data=reset_data_position,
        steps=run.optim.max_steps,  # None for a run of epochs: the ranks count its steps once the data are read
    )
    return newest
