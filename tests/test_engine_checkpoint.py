"""Checkpoints: crash-and-restart under torchrun --max-restarts, world 2 -> 1 resharding, damaged checkpoints.

The torchrun job (tests/engine_jobs/resume.py) kills rank 1 in the middle of
step 4; torchrun restarts both ranks, which resume from the step-4 checkpoint.
Its uninterrupted reference run saves asynchronously after steps 2 and 4.
"""

from __future__ import annotations

import json
import shutil

import pytest

from tests.distributed import run_torchrun


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("resume")
    run_torchrun(["tests/engine_jobs/resume.py", str(out)], nproc=2, timeout=300, torchrun_args=["--max-restarts=2"])
    return out


@pytest.mark.slow
def test_killed_and_restarted_run_follows_the_uninterrupted_losses(run_dir):
    reference = json.loads((run_dir / "uninterrupted.json").read_text())
    by_step = {}
    for line in (run_dir / "losses.jsonl").read_text().splitlines():
        record = json.loads(line)
        by_step[record["step"]] = record  # a later attempt's record of a step wins
    records = [by_step[step] for step in sorted(by_step)]
    assert [r["step"] for r in records] == list(range(6))
    # One restart suffices: backends.distributed_init keeps restarted ranks off the old attempt's addresses.
    assert all(r["attempt"] == 0 for r in records[:4]) and all(r["attempt"] == 1 for r in records[4:])
    assert records[-1]["resumed_from"].endswith("global_step4")
    assert [r["loss"] for r in records] == pytest.approx(reference, abs=1e-6)


@pytest.mark.slow
def test_async_save_holds_the_state_at_the_save_and_resumes_on_the_uninterrupted_losses(run_dir):
    reference = json.loads((run_dir / "uninterrupted.json").read_text())
    record = json.loads((run_dir / "async_resume.json").read_text())
    # save_checkpoint returned before sealing; the next save sealed the previous one, close() the last.
    assert record["folders_after_save"] == [[".partial-global_step2"], [".partial-global_step4", "global_step2"]]
    assert record["folders_after_close"] == ["global_step2", "global_step4", "latest"]
    assert record["resumed_from"].endswith("global_step2")
    assert record["resumed_losses"] == pytest.approx(reference[2:], abs=1e-6)
    # The masters written are those of step 2, although training changed them while the write was in flight.
    assert record["saved_vs_step2"] == 0.0 and record["saved_vs_final"] > 1e-4


@pytest.mark.slow
def test_keeps_the_last_two_and_points_latest_at_the_newest(run_dir):
    ckpt = run_dir / "ckpt"
    assert sorted(p.name for p in ckpt.iterdir() if p.is_dir()) == ["global_step4", "global_step6"]
    assert (ckpt / "latest").read_text() == "global_step6"


def _world_one_engine():
    import backends
    from backends.weights.model_factory import build_causal_lm
    from tests.engine_jobs.common import engine_config, tiny_gpt2

    model = build_causal_lm(tiny_gpt2(), seed=0)
    config = engine_config(3, micro=2, accum=2, clip=1.0, lr=1e-3, weight_decay=0.01, fp16={"enabled": True})
    engine, _, _, _ = backends.initialize(model=model, config=config)
    return engine


@pytest.mark.slow
def test_checkpoint_saved_at_world_two_loads_at_world_one(run_dir):
    from safetensors.torch import load_file

    from backends.checkpoint.export import consolidated_state_dict

    engine = _world_one_engine()
    tag, _ = engine.load_checkpoint(run_dir / "ckpt")
    assert tag.endswith("global_step6") and engine.global_steps == 6 and engine.global_samples == 6 * 2 * 2 * 2
    exported = load_file(str(run_dir / "consolidated.safetensors"))
    loaded = consolidated_state_dict(engine)
    assert loaded.keys() == exported.keys()
    for name, tensor in exported.items():
        assert bool((loaded[name] == tensor).all()), name
    assert engine.loss_scale == 8192.0  # the loss scaler came back too


@pytest.mark.slow
def test_truncated_checkpoint_is_detected_and_the_previous_one_used(run_dir, tmp_path, capsys):
    from planner.errors import UserInputError

    ckpt = tmp_path / "ckpt"
    shutil.copytree(run_dir / "ckpt", ckpt)
    (ckpt / ".partial-global_step8").mkdir()  # a save that crashed half-way is never a candidate
    shard = max((ckpt / "global_step6" / "shards").glob("*.distcp"), key=lambda p: p.stat().st_size)
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    engine = _world_one_engine()
    with pytest.raises(UserInputError, match="truncated"):
        engine.load_checkpoint(ckpt, tag="global_step6")
    capsys.readouterr()
    tag, _ = engine.load_checkpoint(ckpt)
    assert tag.endswith("global_step4") and engine.global_steps == 4
    said = capsys.readouterr().err  # one line for the user, not a Python warning
    assert "global_step6" in said and "is unusable" in said and "trying the previous one" in said


def test_checkpoint_resumes_under_another_zero_stage_and_bucket_size(tmp_path):
    """Saved under ZeRO-1 with 20,000-element buckets, resumed under ZeRO-3 (one unit per block): the units differ,
    so the loader rebuilds the shards; the next step's loss and the weights after it match the uninterrupted run."""
    import backends
    from backends.checkpoint.export import consolidated_state_dict
    from backends.weights.model_factory import build_causal_lm
    from tests.engine_jobs.common import engine_config, global_batches, tiny_gpt2

    def engine(stage, bucket):
        config = engine_config(stage, micro=2, accum=1, clip=1.0, lr=1e-3, weight_decay=0.01, bucket=bucket)
        return backends.initialize(model=build_causal_lm(tiny_gpt2(), seed=0), config=config)[0]

    data = global_batches(3, 2)
    first = engine(1, 20000)
    for batch in data[:2]:
        first.train_batch(batch)
    first.save_checkpoint(tmp_path)
    expected = first.train_batch(data[2])
    second = engine(3, 5000)
    assert [u.names for u in second.optimizer.units] != [u.names for u in first.optimizer.units]
    second.load_checkpoint(tmp_path)
    assert second.train_batch(data[2]) == pytest.approx(expected, abs=1e-6)
    uninterrupted, resumed = consolidated_state_dict(first), consolidated_state_dict(second)
    assert uninterrupted.keys() == resumed.keys()
    assert max((uninterrupted[name] - resumed[name]).abs().max().item() for name in uninterrupted) < 1e-6


def test_checkpoint_of_another_model_is_a_one_line_error(tmp_path):
    import backends
    from backends.weights.model_factory import build_causal_lm, catalog_config, tiny_config
    from planner.errors import UserInputError
    from tests.engine_jobs.common import engine_config, tiny_gpt2

    def engine(hf_config):
        config = engine_config(1, micro=2, accum=1, clip=1.0, lr=1e-3, weight_decay=0.01)
        return backends.initialize(model=build_causal_lm(hf_config, seed=0), config=config)[0]

    engine(tiny_gpt2()).save_checkpoint(tmp_path)
    ckpt = tmp_path / "global_step0"
    with pytest.raises(UserInputError) as llama:
        engine(tiny_config(catalog_config("llama-3-8b"))).load_checkpoint(tmp_path)
    assert str(llama.value) == f"{ckpt} has no tensor 'model.embed_tokens.weight'; it was saved from another model"
    with pytest.raises(UserInputError) as other_vocab:
        engine({**tiny_gpt2(), "vocab_size": 509}).load_checkpoint(tmp_path)
    assert str(other_vocab.value) == (
        f"{ckpt} holds 'transformer.wte.weight' with shape (512, 64), which does not "
        "fit this model ((509, 64) here); it was saved from another model"
    )


def test_failed_async_write_leaves_no_sealed_checkpoint_and_raises_at_the_next_wait(tmp_path, monkeypatch):
    from torch.distributed.checkpoint import FileSystemWriter

    import backends
    from backends.checkpoint.async_save import AsyncSaveError
    from backends.weights.model_factory import build_causal_lm
    from tests.engine_jobs.common import engine_config, global_batches, tiny_gpt2

    config = engine_config(
        1,
        micro=2,
        accum=1,
        clip=1.0,
        lr=1e-3,
        weight_decay=0.01,
        hardware_selector={"checkpoint": {"async_save": True}},
    )
    engine = backends.initialize(model=build_causal_lm(tiny_gpt2(), seed=0), config=config)[0]
    data = global_batches(3, 2)
    engine.train_batch(data[0])
    engine.save_checkpoint(tmp_path)
    assert engine.wait_for_checkpoint() == str(tmp_path / "global_step1")

    def disk_full(self, plan, planner):
        raise OSError("No space left on device (injected)")

    monkeypatch.setattr(FileSystemWriter, "write_data", disk_full)
    engine.train_batch(data[1])
    engine.save_checkpoint(tmp_path)  # returns: the failure happens in the background
    engine.train_batch(data[2])
    with pytest.raises(AsyncSaveError, match=r"global_step2 .* rank 0: .*No space left on device \(injected\)"):
        engine.wait_for_checkpoint()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["global_step1", "latest"]
    assert (tmp_path / "latest").read_text() == "global_step1"
    assert engine.wait_for_checkpoint() is None  # reported once; nothing left in flight
    monkeypatch.undo()
    engine.save_checkpoint(tmp_path)
    engine.close()
    assert (tmp_path / "latest").read_text() == "global_step3"
