"""Building blocks for hand-written loops: CheckpointManager, activation_checkpointing.apply,
setup_distributed_training and ParallelTrainer (docs/engine.md, "Building blocks").

References: an uninterrupted run (a resumed one must continue its losses
exactly), the same model without recomputation (activation checkpointing
changes no gradient), the plan's own numbers (the engine set up from a run
folder runs its batch split and ZeRO stage) and a plain torch loop
(ParallelTrainer's losses).
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import backends
from backends.parts import activation_checkpointing
from planner.errors import UserInputError
from planner.rundir.write import emit_run_folder
from tests.emit_plans import make_plan


class Layer(nn.Module):
    calls = 0  # forward runs, recomputations included

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, x):
        Layer.calls += 1
        return torch.tanh(self.linear(x))


class Stack(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.layers = nn.ModuleList(Layer() for _ in range(3))

    def forward(self, x, y):
        for layer in self.layers:
            x = layer(x)
        return ((x.sum(-1) - y) ** 2).mean()


def data(step):
    generator = torch.Generator().manual_seed(step)
    x = torch.randn(8, 4, generator=generator)
    return x, x.sum(-1) * 0.5


def train(model, optimizer, steps):
    losses = []
    for step in steps:
        loss = model(*data(step))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(float(loss))
    return losses


@pytest.mark.parametrize("async_save", [False, True])
def test_a_resumed_loop_continues_the_uninterrupted_losses(tmp_path, async_save):
    model = Stack()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.05)
    uninterrupted = train(model, optimizer, range(6))

    manager = backends.CheckpointManager(tmp_path / "ckpt", keep_last=2, async_save=async_save)
    model = Stack()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.05)
    for step in range(4):
        train(model, optimizer, [step])
        manager.save(step + 1, model, optimizer, extra={"samples": 8 * (step + 1)})
    manager.wait()
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["global_step3", "global_step4", "latest"]

    fresh = Stack()
    fresh_optimizer = torch.optim.AdamW(fresh.parameters(), lr=0.05)
    step, extra = backends.CheckpointManager(tmp_path / "ckpt").load(fresh, fresh_optimizer)
    assert (step, extra) == (4, {"samples": 32})
    assert train(fresh, fresh_optimizer, range(4, 6)) == pytest.approx(uninterrupted[4:], rel=1e-6)


def test_a_damaged_checkpoint_falls_back_to_the_one_before(tmp_path, capsys):
    manager = backends.CheckpointManager(tmp_path, keep_last=3)
    model = Stack()
    manager.save(1, model)
    expected = [p.detach().clone() for p in model.parameters()]
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    newest = manager.save(2, model)
    shard = next(newest.rglob("*.distcp"))
    shard.write_bytes(shard.read_bytes()[:-5])  # truncated
    fresh = Stack()
    with torch.no_grad():
        for p in fresh.parameters():
            p.zero_()
    assert manager.load(fresh)[0] == 1
    assert all(torch.equal(a, b) for a, b in zip(fresh.parameters(), expected))
    assert "global_step2 is unusable" in capsys.readouterr().err
    assert backends.CheckpointManager(tmp_path / "empty").load(fresh) == (0, {})


def test_activation_checkpointing_recomputes_any_models_blocks_and_changes_no_gradient():
    reference = Stack()
    reference(*data(0)).backward()
    model = Stack()
    assert activation_checkpointing.apply(model, "full") == list(model.layers)
    Layer.calls = 0
    model(*data(0)).backward()
    assert Layer.calls == 6  # each block ran again in backward
    for a, b in zip(model.parameters(), reference.parameters()):
        assert torch.allclose(a.grad, b.grad)
    with pytest.raises(UserInputError, match="found no repeated block in Sequential"):
        activation_checkpointing.apply(nn.Sequential(nn.Linear(2, 2)), "full")
    explicit = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))
    assert activation_checkpointing.apply(explicit, "full", blocks=[explicit[0]]) == [explicit[0]]


def test_setup_from_a_run_folder_runs_the_plans_split_and_stage(tmp_path):
    from backends.engine.setup_training import engine_config_of

    emit_run_folder(
        make_plan(strategy="engine", zero_stage=2, gpus_per_node=1, micro_batch=2, grad_accum=2), tmp_path / "z2"
    )
    emit_run_folder(make_plan(strategy="fsdp", gpus_per_node=1), tmp_path / "fsdp")
    assert engine_config_of(tmp_path / "fsdp").zero_optimization.stage == 3  # FSDP full shard is ZeRO-3's sharding
    # `train --strategy engine` on the same folder: the runner's settings ran it at ZeRO-0 (an audit); both doors
    # now run an FSDP plan at its sharding's stage, grad-op as ZeRO-2.
    from backends.runner.folder import engine_settings, load_run_folder
    from planner.rundir.run_overrides import RunOverrides

    emit_run_folder(make_plan(strategy="fsdp", fsdp_sharding="grad-op", gpus_per_node=1), tmp_path / "grad-op")
    for folder, stage in (("fsdp", 3), ("grad-op", 2)):
        spec = load_run_folder(tmp_path / folder, RunOverrides(), strategy="engine")
        assert engine_settings(spec, spec.run).zero_optimization.stage == stage
        assert engine_config_of(tmp_path / folder).zero_optimization.stage == stage
    dataset = torch.utils.data.TensorDataset(*data(0))
    engine, optimizer, loader, _ = backends.setup_distributed_training(Stack(), tmp_path / "z2", dataset=dataset)
    assert engine.config.zero_optimization.stage == 2 and (engine.micro_batch, engine.grad_accum) == (2, 2)
    assert loader.batch_size == 2
    with pytest.raises(UserInputError, match="not int"):
        backends.setup_distributed_training(Stack(), 3)


def test_parallel_trainer_follows_a_torch_loop_and_stops_when_asked():
    x, y = data(0)
    dataset = torch.utils.data.TensorDataset(x, y)
    config = {"train_micro_batch_size_per_gpu": 8, "optimizer": {"type": "AdamW", "params": {"lr": 0.05}}}
    rows = backends.ParallelTrainer(config).train(Stack(), dataset, epochs=3)
    model = Stack()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.05, weight_decay=0.0)  # the engine block's defaults
    expected = []
    for epoch in range(3):
        order = torch.randperm(8, generator=torch.Generator().manual_seed(epoch))  # DistributedSampler's order
        loss = model(x[order], y[order])
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        expected.append(float(loss))
    assert [row["loss"] for row in rows] == pytest.approx(expected, rel=1e-6)
    stopped = backends.ParallelTrainer(config).train(
        Stack(), dataset, epochs=5, callbacks={"once": lambda m, s: "stop" if s == 2 else None}
    )
    assert len(stopped) == 2


@pytest.mark.slow
def test_zero_optimizer_in_a_hand_written_loop_follows_a_torch_loop(tmp_path):
    """Reference: one process stepping torch's optimizer on each whole global batch, clipped at 1.0; and for a
    resumed ZeroOptimizer, the uninterrupted run it was saved from."""
    import json

    from tests.distributed import run_torchrun
    from tests.engine_inputs_models import Regressor, dataset

    saved = tmp_path / "checkpoints"
    run_torchrun(["tests/engine_jobs/standalone_zero.py", str(tmp_path / "out.json"), str(saved)], nproc=2,
                 timeout=300)  # fmt: skip
    results = json.loads((tmp_path / "out.json").read_text())
    for name in [name for name in results if not name.endswith(" resumed")]:
        # A CheckpointManager checkpoint of the ZeroOptimizer, saved on 2 ranks after step 2, resumes on the same
        # 2 ranks, and on one process, onto the uninterrupted run's steps 3 and 4.
        losses, weights = results.pop(name + " resumed")
        assert losses == pytest.approx(results[name][0][2:], rel=1e-6), name
        for got, want in zip(weights, results[name][1], strict=True):
            assert got == pytest.approx(want, rel=1e-6, abs=1e-7), name
        from tests.engine_jobs.standalone_zero import CASES, run

        alone = run(*CASES[name], rank=0, world=1, checkpoints=saved / name, steps=range(2, 4), reduce=False)
        assert alone[0] == pytest.approx(results[name][0][2:], rel=1e-5), name
        for got, want in zip(alone[1], results[name][1], strict=True):
            assert got == pytest.approx(want, rel=1e-5, abs=1e-6), name
    hyper = {
        "adamw": (torch.optim.AdamW, {"lr": 0.05, "weight_decay": 0.01}),
        "sgd": (torch.optim.SGD, {"lr": 0.05, "momentum": 0.9}),
    }
    for name, (losses, weights) in results.items():
        optimizer_cls, kwargs = hyper[name.split("-")[0]]
        torch.manual_seed(0)
        model = Regressor()
        optimizer = optimizer_cls(model.parameters(), **kwargs)
        x, y = dataset().tensors
        expected = []
        for step in range(4):
            loss = model(x[step * 8 : (step + 1) * 8], y[step * 8 : (step + 1) * 8]).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad()
            expected.append(float(loss))
        assert losses == pytest.approx(expected, rel=1e-5), name
        for got, want in zip(weights, model.parameters()):
            assert got == pytest.approx(want.detach().flatten().tolist(), rel=1e-4, abs=1e-6), name


def test_zero_optimizer_refuses_what_it_cannot_shard():
    from backends.zero.standalone import ZeroOptimizer

    class Lamb(torch.optim.Optimizer):
        pass

    with pytest.raises(UserInputError, match="element-wise"):
        ZeroOptimizer(Lamb, Stack().parameters())
    with pytest.raises(UserInputError, match="pass the model"):
        ZeroOptimizer(torch.optim.AdamW, Stack().parameters(), stage=3)


@pytest.mark.slow
def test_checkpoint_manager_keeps_fsdp_shards_on_their_ranks_and_resumes_exactly(tmp_path):
    import json

    from tests.distributed import run_torchrun

    run_torchrun(["tests/engine_jobs/checkpoint_manager_fsdp.py", str(tmp_path / "ckpt"), str(tmp_path / "out.json")],
                 nproc=2, timeout=300)  # fmt: skip
    result = json.loads((tmp_path / "out.json").read_text())
    assert result["step"] == 2
    assert result["resumed"] == pytest.approx(result["uninterrupted"], rel=1e-6)
    assert result["files"] == ["global_step2/state/__0_0.distcp", "global_step2/state/__1_0.distcp"]  # one per rank


def test_building_blocks_refuse_wrong_arguments_in_one_line_and_write_nothing(tmp_path):
    """A new user's audit found these ending in TypeError, AttributeError, StopIteration, multi-line pydantic dumps,
    a "false" that turned async saving on, or a .partial folder left behind."""
    from backends.zero.standalone import ZeroOptimizer

    model = Stack()
    optimizer = torch.optim.AdamW(model.parameters())
    (tmp_path / "a-file").write_text("")
    calls = [
        (lambda: backends.CheckpointManager(None), "directory is the folder"),
        (lambda: backends.CheckpointManager(tmp_path / "a-file"), "is a file"),
        (lambda: backends.CheckpointManager(tmp_path / "c", async_save="false"), "async_save must be True or False"),
        (lambda: backends.CheckpointManager(tmp_path / "c").save("one", model, optimizer), "step is the whole"),
        (lambda: backends.CheckpointManager(tmp_path / "c").save(-1, model, optimizer), "step is the whole"),
        (lambda: backends.CheckpointManager(tmp_path / "c").save(1, model, model), "optimizer a torch optimizer"),
        (lambda: backends.CheckpointManager(tmp_path / "c").save(1, None, optimizer), "model is a torch module"),
        (lambda: backends.CheckpointManager(tmp_path / "c").save(1, model, optimizer, extra={"x": object()}),
         "extra must be a dict of JSON values"),
        (lambda: ZeroOptimizer(optimizer, model.parameters()), "takes the optimizer's class"),
        (lambda: ZeroOptimizer(torch.optim.AdamW, None), "params must be the model's parameters"),
        (lambda: ZeroOptimizer(torch.optim.AdamW, iter([])), "got nothing"),
        (lambda: ZeroOptimizer(torch.optim.AdamW, model.parameters(), stage=True), "stage must be 1, 2 or 3"),
        (lambda: ZeroOptimizer(torch.optim.AdamW, model.parameters(), max_grad_norm=float("nan")), "max_grad_norm"),
        (lambda: backends.ParallelTrainer(tmp_path / "nope"), "nope: no such run folder"),
        (lambda: backends.ParallelTrainer({}).train(model, None), "dataset is a map-style dataset"),
        (lambda: backends.ParallelTrainer({}).train(model, [1], callbacks=[print]), "callbacks is a dict"),
    ]  # fmt: skip
    for call, message in calls:
        with pytest.raises(ValueError, match=message) as raised:
            call()
        assert "\n" not in str(raised.value), str(raised.value)
    assert not (tmp_path / "c").exists() or not any((tmp_path / "c").iterdir())  # no .partial left behind


def test_activation_checkpointing_covers_both_stacks_of_an_encoder_decoder_and_refuses_to_nest():
    """An encoder-decoder's blocks are both its stacks (the memory estimate counts both); the same mode twice changes
    nothing, another mode on top would nest and is one line; T5's blocks hold no attention module by name."""
    from transformers import BartConfig, BartForConditionalGeneration, T5Config, T5ForConditionalGeneration

    def bart():
        torch.manual_seed(0)
        config = BartConfig(d_model=32, encoder_layers=2, decoder_layers=3, encoder_attention_heads=2,
                            decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64, vocab_size=64,
                            max_position_embeddings=64, dropout=0.0)  # fmt: skip
        return BartForConditionalGeneration(config)

    ids = torch.randint(0, 64, (2, 16), generator=torch.Generator().manual_seed(0))
    reference = bart()
    reference(input_ids=ids, labels=ids).loss.backward()
    model = bart()
    blocks = activation_checkpointing.apply(model, "full")
    assert sorted(type(block).__name__ for block in blocks) == ["BartDecoderLayer"] * 3 + ["BartEncoderLayer"] * 2
    wrapped = [block.forward for block in blocks]
    assert activation_checkpointing.apply(model, "full") == blocks  # again: nothing re-wrapped
    assert [block.forward for block in blocks] == wrapped
    model(input_ids=ids, labels=ids).loss.backward()
    for a, b in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(a.grad, b.grad)
    with pytest.raises(UserInputError, match="already recomputes as full: the two would nest"):
        activation_checkpointing.apply(model, "op")
    t5 = T5ForConditionalGeneration(T5Config(d_model=32, d_ff=64, num_layers=2, num_heads=2, d_kv=16, vocab_size=64))
    with pytest.raises(UserInputError, match="no attention module in T5Block; use full checkpointing"):
        activation_checkpointing.apply(t5, "selective")
    assert activation_checkpointing.applied_mode(t5) == "none"  # refused before any block was wrapped


def test_an_engine_json_edited_to_another_layout_is_one_line_not_an_abort(tmp_path):
    """An audit: engine.json's layout edited to 1 virtual stage with 1F1B ran plan.json's 2 virtual stages with the
    edited schedule, and the ranks aborted in gloo (SIGABRT); tp 2 for pp 2 ran pp 2 without a word. The layout,
    the schedule and sequence parallelism are the plan's; ZeRO and bucket edits still act (docs/engine.md)."""
    import json

    from backends.runner.folder import engine_settings, load_run_folder
    from planner.rundir.run_overrides import RunOverrides

    plan = make_plan(strategy="engine", pipeline_parallel=2, virtual_stages=2, pipeline_schedule="interleaved-1f1b",
                     grad_accum=2)  # fmt: skip
    emit_run_folder(plan, tmp_path / "run")
    engine_json = tmp_path / "run" / "engine.json"
    original = json.loads(engine_json.read_text())
    edits = [
        ({"layout": {**original["hardware_selector"]["layout"], "virtual_stages": 1}, "pipeline_schedule": "1f1b"},
         "layout dp 1 x tp 1 x pp 2 (plan.json's: dp 1 x tp 1 x pp 2, 2 virtual stages); pipeline_schedule 1f1b"),
        ({"layout": {**original["hardware_selector"]["layout"], "tp": 2, "pp": 1, "virtual_stages": 1}},
         "layout dp 1 x tp 2 x pp 1 (plan.json's"),
    ]  # fmt: skip
    for edit, said in edits:
        edited = {**original, "hardware_selector": {**original["hardware_selector"], **edit}}
        engine_json.write_text(json.dumps(edited))
        spec = load_run_folder(tmp_path / "run", RunOverrides())
        with pytest.raises(UserInputError, match="the layout is the plan's; re-plan") as refused:
            engine_settings(spec, spec.run)
        assert said in str(refused.value) and "\n" not in str(refused.value)
    bucket = {**original, "zero_optimization": {**original["zero_optimization"], "reduce_bucket_size": 1234}}
    engine_json.write_text(json.dumps(bucket))
    spec = load_run_folder(tmp_path / "run", RunOverrides())
    assert engine_settings(spec, spec.run).zero_optimization.reduce_bucket_size == 1234


def test_reading_whether_transformers_checkpoints_raises_no_deprecation_warning():
    """An audit saw transformers 5's "`is_gradient_checkpointing` is deprecated" FutureWarning on every engine run:
    the new name is read where the model has it; the answer is transformers' own."""
    import warnings

    from transformers import GPT2Config, GPT2LMHeadModel

    from backends.parts.activation_checkpointing import transformers_checkpointing_on

    model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=64))
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        assert transformers_checkpointing_on(model) is False
        model.activation_checkpointing_enable()
        assert transformers_checkpointing_on(model) is True
