"""A tied embedding and head write the shared weight's gradient into its .grad in place (backends/zero/tied_gradient.py).

Counts allocations, not time: the weight's size (vocabulary x hidden) is one
nothing else in these steps has, so an allocation of exactly its bytes during
a step is autograd's separate head or embedding gradient, which on GPT-2-small
are the two 147 MiB transients at the end of backward. With the mechanism
turned off (the stage never says the .grad view is fresh) the same steps make
two such allocations per backward: that is the reference the check is against.
And the gradients must be bit-identical to torch's own. World of one: no
process group needed.
"""

from __future__ import annotations

import copy

import pytest

from tests.allocations import allocated_sizes, zero_train_step

torch = pytest.importorskip("torch")

VOCAB, HIDDEN, ROWS, SEQ = 1000, 24, 2, 15  # weight 96,000 bytes; logits 120,000


class TiedLM(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, HIDDEN)
        self.mix = torch.nn.Linear(HIDDEN, HIDDEN)
        self.head = torch.nn.Linear(HIDDEN, VOCAB, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, ids):
        logits = self.head(torch.tanh(self.mix(self.embed(ids))))
        return torch.nn.functional.cross_entropy(logits.view(-1, VOCAB), ids.view(-1))


def _ids(seed: int):
    ids = torch.randint(0, VOCAB, (ROWS, SEQ), generator=torch.Generator().manual_seed(seed))
    ids[0, :5] = 7  # a token seen several times: its rows are summed before they reach the weight
    return ids


def _optimizer(stage: int):
    from backends.parts.mixed_precision import LossScaler, compute_dtype
    from backends.zero import zero_optimizer_class
    from backends.zero.comm import DataParallelComm
    from planner.contract.engine_config import EngineConfig

    torch.manual_seed(0)
    model = TiedLM()
    config = EngineConfig.model_validate(
        {
            "zero_optimization": {"stage": stage, "reduce_bucket_size": 1000},
            "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
        }
    )
    return model, zero_optimizer_class(stage)(
        model, config, DataParallelComm(), compute_dtype(config), LossScaler(config)
    )


def _train_step(model, zero, seed: int, boundary: bool = True) -> None:
    zero_train_step(zero, lambda: model(_ids(seed)), boundary)


def test_gradients_are_bit_identical_to_torch_and_hooks_run_once():
    from backends.zero.tied_gradient import install

    torch.manual_seed(0)
    plain = TiedLM()
    tied_model = copy.deepcopy(plain)
    assert tied_model.head.weight is tied_model.embed.weight
    tied = install(tied_model)
    assert tied is not None and tied.weight is tied_model.embed.weight
    arrivals = []
    tied.weight.register_post_accumulate_grad_hook(lambda param: arrivals.append(param.grad.clone()))
    for param in tied_model.parameters():
        param.grad = torch.zeros_like(param)  # what a ZeRO stage's arena views hold at a window's start
    for micro, seed in enumerate((1, 2, 3)):  # an accumulation window: only the first backward is fresh
        tied.fresh = micro == 0
        plain(_ids(seed)).backward()
        tied_model(_ids(seed)).backward()
        for (name, mine), theirs in zip(tied_model.named_parameters(), plain.parameters()):
            assert torch.equal(mine.grad, theirs.grad), (name, micro)
        assert torch.equal(arrivals[-1], plain.embed.weight.grad)  # the hook saw the finished gradient
    assert len(arrivals) == 3 and tied.in_place == 1
    with torch.no_grad():  # evaluation: torch's own forwards, nothing recorded
        assert torch.equal(tied_model(_ids(4)), plain(_ids(4)))


def test_install_leaves_untied_and_unusual_embeddings_alone():
    from backends.zero.tied_gradient import install

    untied = TiedLM()
    untied.head.weight = torch.nn.Parameter(untied.embed.weight.detach().clone())
    assert install(untied) is None
    padded = TiedLM()
    padded.embed.padding_idx = 0
    assert install(padded) is None


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
@pytest.mark.parametrize("enabled", [True, False])
def test_no_weight_sized_gradient_is_allocated(stage, enabled):
    from torch.profiler import ProfilerActivity, profile

    model, zero = _optimizer(stage)
    assert zero.tied is not None and zero.tied.weight is model.embed.weight
    if not enabled:
        zero.tied = None  # the stage never marks the view fresh: torch's own backward, the reference
    weight_bytes = VOCAB * HIDDEN * 4
    sizes_of_the_rest = {p.numel() * 4 for p in model.parameters() if p is not model.embed.weight}
    assert weight_bytes not in sizes_of_the_rest | {ROWS * SEQ * VOCAB * 4}
    _train_step(model, zero, seed=0)  # the first step allocates the arenas
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as profiler:
        for step in range(2):
            _train_step(model, zero, seed=10 + step, boundary=False)  # opens the window: fresh
            _train_step(model, zero, seed=20 + step)  # accumulates: torch's own backward either way
    sizes = allocated_sizes(profiler)
    assert sizes, "the profiler saw no allocation at all: the check would pass vacuously"
    # 4 backwards, each of torch's own making the head's gradient and the embedding's
    expected = 2 * 2 + (0 if enabled else 2 * 2)
    assert sizes.count(weight_bytes) == expected


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_training_matches_the_untied_mechanism_bit_for_bit(stage):
    runs = []
    for enabled in (True, False):
        model, zero = _optimizer(stage)
        if not enabled:
            zero.tied = None
        for step in range(3):
            _train_step(model, zero, seed=30 + step, boundary=False)
            _train_step(model, zero, seed=40 + step)
        runs.append(zero.master.detach().clone())  # every stage's updated weights (ZeRO-3 frees the model's)
    assert torch.equal(*runs)


def test_a_deep_copy_computes_with_its_own_weight():
    from backends.zero.tied_gradient import install

    torch.manual_seed(0)
    model = TiedLM()
    tied = install(model)
    tied.fresh = True
    copied = copy.deepcopy(model)  # an EMA copy, say
    assert copied.embed._tied_gradient.weight is copied.embed.weight is copied.head.weight
    assert not copied.embed._tied_gradient.fresh
    with torch.no_grad():
        copied.embed.weight.mul_(2.0)
    reference = TiedLM()
    reference.load_state_dict(copied.state_dict())
    assert torch.equal(copied(_ids(5)), reference(_ids(5)))
    copied(_ids(5)).backward()
    reference(_ids(5)).backward()
    assert torch.equal(copied.embed.weight.grad, reference.embed.weight.grad)
    assert model.embed.weight.grad is None  # the original's weight was not touched
