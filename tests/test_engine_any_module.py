"""Any nn.Module trains on our engine the way a DeepSpeed script trains it (docs/engine.md).

Reference: the same model trained by a plain single-process torch loop
(AdamW, the same LambdaLR, the whole global batch per step). The engine runs
it on two gloo ranks under ZeRO 0-3 with the script's own optimizer object,
scheduler function and dataset (backends/engine/initialize_args.py), and its losses
and final weights must match. In one process: the batch and output forms
(tensor, tuple, dict; a scalar, `.loss`, `[0]`, `["loss"]`), and the one-line
errors for a batch the forward cannot take or an output without a loss.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch
from torch import nn

import backends
from planner.errors import UserInputError
from tests.distributed import run_torchrun
from tests.engine_inputs_models import STEPS, WORLD, Regressor, dataset, global_order, hyperparameters


def reference() -> tuple[list[float], dict[str, list[float]]]:
    torch.manual_seed(0)
    model = Regressor()
    lr, weight_decay, micro = hyperparameters()
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 / (1 + step))
    x, y = dataset().tensors
    order = global_order()
    losses = []
    for step in range(STEPS):
        shares = [order[rank::WORLD][step * micro : (step + 1) * micro] for rank in range(WORLD)]
        rows = [index for share in shares for index in share]
        loss = model(x[rows], y[rows]).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        scheduler.step()
        losses.append(float(loss))
    return losses, {name: p.detach().flatten().tolist() for name, p in model.named_parameters()}


@pytest.mark.slow
def test_a_plain_module_trains_under_every_zero_stage_as_a_torch_loop_does(tmp_path):
    run_torchrun(["tests/engine_jobs/any_module.py", str(tmp_path / "out")], nproc=WORLD, timeout=300)
    expected_losses, expected_weights = reference()
    for rank in range(WORLD):
        results = json.loads((tmp_path / f"out.{rank}.json").read_text())
        for stage, (losses, weights) in results.items():
            assert losses == pytest.approx(expected_losses, rel=1e-5), f"stage {stage}"
            for name, values in expected_weights.items():
                assert weights[name] == pytest.approx(values, rel=1e-4, abs=1e-6), f"stage {stage} {name}"


class Scalar(nn.Module):
    def __init__(self, returns: str):
        super().__init__()
        self.linear, self.returns = nn.Linear(3, 1), returns

    def forward(self, x, y=None):
        loss = ((self.linear(x).squeeze(-1) - (0 if y is None else y)) ** 2).mean()
        return {"scalar": loss, "tuple": (loss, x), "dict": {"loss": loss}, "attribute": SimpleNamespace(loss=loss)}[
            self.returns
        ]


def _engine(model, stage=0):
    return backends.initialize(model=model, config={"train_micro_batch_size_per_gpu": 2,
                                                     "zero_optimization": {"stage": stage}})[0]  # fmt: skip


@pytest.mark.parametrize("returns", ["scalar", "tuple", "dict", "attribute"])
@pytest.mark.parametrize("batch_form", ["tensor", "tuple", "dict", "arguments"])
def test_every_batch_and_output_form_gives_the_models_own_loss(returns, batch_form):
    torch.manual_seed(0)
    model = Scalar(returns)
    x, y = torch.randn(2, 3), torch.randn(2)
    expected = float(((model.linear(x).squeeze(-1) - (0 if batch_form == "tensor" else y)) ** 2).mean())
    engine = _engine(model)
    calls = {
        "tensor": lambda: engine(x),
        "tuple": lambda: engine((x, y)),
        "dict": lambda: engine({"x": x, "y": y}),
        "arguments": lambda: engine(x, y=y),
    }
    outputs = calls[batch_form]()
    assert type(outputs) is type(model(x, y))  # the model's own output, not a bare tensor
    engine.backward(outputs)
    engine.step()
    assert engine.last_loss == pytest.approx(expected, rel=1e-6)


def test_a_batch_the_forward_cannot_take_is_one_line_naming_its_signature():
    engine = _engine(nn.Sequential(nn.Linear(3, 1)))
    with pytest.raises(UserInputError) as caught:
        engine((torch.randn(2, 3), torch.randn(2)))
    message = str(caught.value)
    assert "\n" not in message and "Sequential.forward(input)" in message and "tensor(2, 3), tensor(2,)" in message
    outputs = engine(torch.randn(2, 3))  # its one argument: fine, but it is a prediction, not a loss
    with pytest.raises(UserInputError, match=r"returned tensor\(2, 1\), not a loss"):
        engine.backward(outputs)


def test_a_hugging_face_model_returns_its_output_with_the_loss():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=32, n_positions=16)
    config.resid_pdrop = config.embd_pdrop = config.attn_pdrop = 0.0  # the same loss on every call
    model = GPT2LMHeadModel(config)
    ids = torch.randint(0, 32, (2, 8))
    expected = float(model(input_ids=ids, labels=ids).loss)
    engine = _engine(model, stage=3)
    for batch in (ids, (ids, ids), {"input_ids": ids}, {"input_ids": ids, "labels": ids}):
        outputs = engine(batch)
        assert float(outputs.loss) == pytest.approx(expected, rel=1e-5) and outputs.logits.shape == (2, 8, 32)
    engine.backward(outputs.loss)


def test_an_optimizer_object_overrides_the_configs_block_as_deepspeeds_does(capsys):
    """DeepSpeed's initialize: the object "overrides any optimizer definition in the DeepSpeed json config" (its
    docstring), and DeepSpeed trains with it; ours refused the pair, so a script passing its own AdamW failed on a
    GPU plan's ds_config.json, which has an optimizer block. The reference: the same object with no block."""
    micro = {"train_micro_batch_size_per_gpu": 2}
    block = {"optimizer": {"type": "SGD", "params": {"lr": 0.5}}}
    trained = []
    for config in (micro, {**micro, **block}):
        torch.manual_seed(0)
        model = Scalar("scalar")
        engine = backends.initialize(model=model, optimizer=torch.optim.AdamW(model.parameters(), lr=0.01),
                                     config=config)[0]  # fmt: skip
        x, y = torch.randn(2, 3), torch.randn(2)
        engine.backward(engine(x, y))
        engine.step()
        trained.append([param.detach().clone() for param in model.parameters()])
    assert all(torch.equal(ours, reference) for ours, reference in zip(trained[1], trained[0]))
    assert "optimizer overridden by initialize's optimizer object" in capsys.readouterr().out


def test_deepspeed_arguments_that_cannot_apply_are_one_line():
    model = Scalar("scalar")
    with pytest.raises(UserInputError, match="not one our engine runs"):
        backends.initialize(model=model, optimizer=torch.optim.RMSprop(model.parameters()))
    with pytest.raises(UserInputError, match="model_parameters holds 1 tensors but the model has 2"):
        backends.initialize(model=model, model_parameters=[model.linear.weight])
    bound = torch.optim.lr_scheduler.StepLR(torch.optim.SGD(model.parameters(), lr=0.1), 1)
    with pytest.raises(UserInputError, match="bound to another optimizer"):
        backends.initialize(model=model, lr_scheduler=bound)


def test_seed_style_mistakes_at_initialize_are_one_line():
    """initialize(model, config) positionally (deepspeed's first positional is args), a model that is not a
    module, and a CUDA config on a machine without CUDA."""
    model = Scalar("scalar")
    with pytest.raises(UserInputError, match="first positional argument is args, as in deepspeed.initialize"):
        backends.initialize(model, {"train_batch_size": 1})
    with pytest.raises(UserInputError, match="model must be a torch.nn.Module, not str"):
        backends.initialize(model="not a module")
    if not torch.cuda.is_available():
        with pytest.raises(UserInputError, match="asks for CUDA .* and this machine has none"):
            backends.initialize(model=model, config={"hardware_selector": {"device": "cuda"}})


def test_two_different_configs_are_refused_and_two_equal_ones_run():
    """config and config_params (or args.deepspeed_config) that differ: DeepSpeed refuses configs given in two
    places ("Not sure how to proceed"), and whichever we took, the other would be silently ignored."""
    model = Scalar("scalar")
    one, two = {"train_micro_batch_size_per_gpu": 1}, {"train_micro_batch_size_per_gpu": 2}
    with pytest.raises(UserInputError, match=r"^backends.initialize was given two different configs, config and "
                                             r"config_params; pass only one of them$"):  # fmt: skip
        backends.initialize(model=model, config=one, config_params=two)
    with pytest.raises(UserInputError, match="two different configs, config and args.deepspeed_config"):
        backends.initialize(SimpleNamespace(deepspeed_config=two), model=model, config=one)
    engine, *_ = backends.initialize(model=model, config=one, config_params=dict(one))
    assert engine.config.train_micro_batch_size_per_gpu == 1


def test_tensor_or_pipeline_parallel_on_a_module_they_cannot_split_is_one_line_at_initialize():
    from backends.decoder_anatomy import architecture_of

    for layout in ({"tp": 2}, {"pp": 2}):  # one process: it says how to start the ranks
        with pytest.raises(UserInputError) as caught:
            backends.initialize(model=nn.Sequential(nn.Linear(2, 2)), config={"hardware_selector": {"layout": layout}})
        assert "start the script under torchrun --nproc_per_node=2" in str(caught.value)
    with pytest.raises(UserInputError) as caught:  # what parallelize asks first, inside initialize, on the ranks
        architecture_of(nn.Sequential(nn.Linear(2, 2)))
    assert "Sequential is not one: use tp 1 and pp 1" in str(caught.value) and "\n" not in str(caught.value)
