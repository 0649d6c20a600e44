"""A framework door's mismatch line says the fix that applies: a run on another number of ranks than the plan's
is fixed by the launch, not by building the arguments from the plan (which the script already does).

The reference is each line written out in full; the Trainer's own arguments are built in-process (one rank)."""

from __future__ import annotations

import types

import pytest

from planner.rundir.run_options import run_config
from tests.emit_plans import make_plan


def _begin(plan, args):
    from transformers import TrainerControl, TrainerState

    from hardware_selector.integrations import PlanCallback

    PlanCallback(plan, record=False).on_train_begin(args, TrainerState(), TrainerControl())


def test_a_two_rank_plan_run_on_one_process_says_to_launch_two(tmp_path):
    from hardware_selector import training_arguments
    from hardware_selector.integrations import PlanMismatch

    plan = make_plan(gpus_per_node=2, strategy="ddp", micro_batch=4, grad_accum=2)
    with pytest.raises(PlanMismatch) as caught:
        _begin(plan, training_arguments(plan, tmp_path / "out"))  # the plan's own arguments, on one process
    assert str(caught.value) == (
        "the Trainer does not run the plan for gpt2: the plan has 2 ranks, this run 1: "
        "launch with torchrun --nproc_per_node=2 (or plan again for 1)"
    )


def test_an_fsdp_plan_on_one_process_says_to_launch_its_ranks_before_the_trainer_refuses_it(tmp_path, monkeypatch):
    """Found by a new user's audit (2026-11-30): an FSDP plan's script run on one process ended in transformers'
    "ValueError: Using fsdp only works in distributed training" and its traceback, raised in Trainer.__init__, before
    on_train_begin could say the launch. The callback, built before the Trainer, says it; on the plan's own rank
    count, or strict=False, it is built as before."""
    from transformers import Trainer

    from hardware_selector import training_arguments
    from hardware_selector.integrations import PlanCallback, PlanMismatch

    monkeypatch.delenv("WORLD_SIZE", raising=False)
    plan = make_plan(gpus_per_node=2, strategy="fsdp", micro_batch=4, grad_accum=2)
    with pytest.raises(ValueError, match="fsdp only works in distributed training|process group has not been"):
        Trainer(model=types.SimpleNamespace(), args=training_arguments(plan, tmp_path / "out"))  # what it was
    with pytest.raises(PlanMismatch) as caught:
        PlanCallback(plan, record=False)
    assert str(caught.value) == (
        "the Trainer does not run the plan for gpt2: the plan has 2 ranks, this run 1: "
        "launch with torchrun --nproc_per_node=2 (or plan again for 1)"
    )
    PlanCallback(plan, record=False, strict=False)
    monkeypatch.setenv("WORLD_SIZE", "2")
    PlanCallback(plan, record=False)
    monkeypatch.delenv("WORLD_SIZE")  # an MPI launch (LAUNCHER=mpirun with the script): its own count (a review)
    for name, value in {"PMI_RANK": "0", "PMI_SIZE": "2", "MPI_LOCALRANKID": "0", "MPI_LOCALNRANKS": "2"}.items():
        monkeypatch.setenv(name, value)
    PlanCallback(plan, record=False)


def test_another_difference_beside_the_ranks_keeps_its_own_fix(tmp_path):
    from hardware_selector import training_arguments
    from hardware_selector.integrations import PlanMismatch

    plan = make_plan(gpus_per_node=2, strategy="ddp", micro_batch=4, grad_accum=2)
    with pytest.raises(PlanMismatch) as caught:
        _begin(plan, training_arguments(plan, tmp_path / "out", gradient_accumulation_steps=3))
    assert str(caught.value) == (
        "the Trainer does not run the plan for gpt2: the plan has 2 ranks, this run 1: "
        "launch with torchrun --nproc_per_node=2 (or plan again for 1); global batch 4 x 3 x 1 ranks = 12 (plan 16); "
        "build the arguments with training_arguments(plan, ...) or plan again"
    )


def test_the_lightning_line_names_its_devices_when_the_rank_count_differs():
    from backends.integrations.plan_check import lightning_differences, mismatch_line

    plan = make_plan(gpus_per_node=2, nodes=2, strategy="ddp", micro_batch=4, grad_accum=2)
    run = run_config(plan)
    trainer = types.SimpleNamespace(accumulate_grad_batches=2, world_size=1, precision="32-true")
    found = lightning_differences(trainer, run, micro=4)
    assert mismatch_line(
        "the Lightning Trainer does not run the plan", found, "build it with plan_trainer_kwargs(plan)"
    ) == (
        "the Lightning Trainer does not run the plan: the plan has 4 ranks, this run 1: "
        "pass devices=2, num_nodes=2 (plan_trainer_kwargs(plan) sets them) (or plan again for 1)"
    )


@pytest.mark.parametrize("mode", ["selective", "op"])
def test_a_selective_or_op_plan_runs_through_our_wrapper_not_the_trainers_whole_block_recompute(tmp_path, mode):
    """The Trainer checkpoints whole blocks only (its gradient_checkpointing), which training_args.json turns on for
    any checkpointed plan. A selective or op-level plan is therefore not what it runs, unless the model carries our
    wrapper and the Trainer's own is off: the line says which, and the fix; the runner's --trainer door does both
    (_plans_checkpointing)."""
    from transformers import AutoModelForCausalLM, GPT2Config, TrainerControl, TrainerState

    from backends.runner.trainer import _plans_checkpointing
    from hardware_selector import training_arguments
    from hardware_selector.integrations import PlanCallback, PlanMismatch
    from planner.emit.training_args import checkpointing_argument

    plan = make_plan(gpus_per_node=1, strategy="ddp", micro_batch=1, grad_accum=2, activation_checkpointing=mode)
    callback = PlanCallback(plan, record=False)
    args = training_arguments(plan, tmp_path / "out")
    model = AutoModelForCausalLM.from_config(GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=64))
    with pytest.raises(PlanMismatch) as caught:
        callback.on_train_begin(args, TrainerState(), TrainerControl(), model=model)
    wrapper = f'activation_checkpointing.apply(model, "{mode}") (from backends import activation_checkpointing)'
    turn_off = f"turn the Trainer's off: {checkpointing_argument()}=False"
    assert str(caught.value) == (
        f"the Trainer does not run the plan for gpt2: activation checkpointing full (plan {mode}, which runs only "
        f"through our wrapper): apply {wrapper} and {turn_off}"
    )  # and no "build the arguments with training_arguments(plan, ...)": that turns the Trainer's back on
    from backends import activation_checkpointing  # the import the line names

    activation_checkpointing.apply(model, mode)
    with pytest.raises(PlanMismatch) as caught:  # the wrapper on, the Trainer's still on: only that step is left
        callback.on_train_begin(args, TrainerState(), TrainerControl(), model=model)
    assert str(caught.value).endswith(f"(plan {mode}, which runs only through our wrapper): {turn_off}")
    kwargs = {checkpointing_argument(): True}
    _plans_checkpointing(model, plan.config.activation_checkpointing, kwargs)  # what the --trainer door does
    assert kwargs == {checkpointing_argument(): False}
    callback.on_train_begin(
        training_arguments(plan, tmp_path / "out", **kwargs), TrainerState(), TrainerControl(), model=model
    )  # runs the plan: no line
    from planner.rundir.write import emit_run_folder

    emit_run_folder(plan, tmp_path / "run")  # its README says which files run the mode and which recompute blocks
    assert f'apply `activation_checkpointing.apply(model, "{mode}")`' in (tmp_path / "run" / "README.md").read_text()


def test_transformers_own_checkpointing_on_the_model_counts_as_what_runs(tmp_path):
    """gradient_checkpointing_enable() on the model recomputes whole blocks whatever the arguments say: PlanCallback
    counts it (a plan without checkpointing is told so, a selective one what to drop; a full plan runs), and our
    wrapper, which Lightning's PlanStrategy applies, takes it as full: a no-op for a full plan, one line for another
    mode (the two would nest)."""
    from transformers import AutoModelForCausalLM, GPT2Config, TrainerControl, TrainerState

    from backends import activation_checkpointing
    from hardware_selector import training_arguments
    from hardware_selector.integrations import PlanCallback, PlanMismatch
    from planner.errors import UserInputError

    def hf_checkpointed():
        model = AutoModelForCausalLM.from_config(GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=64))
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        return model

    plans = {mode: make_plan(gpus_per_node=1, strategy="ddp", micro_batch=1, grad_accum=2, activation_checkpointing=mode)
             for mode in ("none", "full", "selective")}  # fmt: skip
    model = hf_checkpointed()
    begin = TrainerState(), TrainerControl()
    with pytest.raises(PlanMismatch, match=r"activation checkpointing full \(plan none\)"):
        PlanCallback(plans["none"], record=False).on_train_begin(
            training_arguments(plans["none"], tmp_path / "a"), *begin, model=model
        )
    with pytest.raises(PlanMismatch, match=r"plan selective, .*: drop gradient_checkpointing_enable\(\) on the model"):
        PlanCallback(plans["selective"], record=False).on_train_begin(
            training_arguments(plans["selective"], tmp_path / "b", gradient_checkpointing=False), *begin, model=model
        )
    PlanCallback(plans["full"], record=False).on_train_begin(
        training_arguments(plans["full"], tmp_path / "c"), *begin, model=model
    )
    activation_checkpointing.apply(model, "full")  # transformers' full stands: nothing nested inside it
    assert not any(hasattr(module, activation_checkpointing.APPLIED) for module in model.modules())
    with pytest.raises(UserInputError, match=r"already recomputes as full \(transformers' gradient checkpointing\)"):
        activation_checkpointing.apply(hf_checkpointed(), "selective")
