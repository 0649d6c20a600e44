"""`--kernels compile` compiles the loss as well as the blocks (backends/parts/kernels.py), and the plan counts the
fused loss it gets (planner/memory/stack_memory.py, compiles_loss).

References: torch's own autograd on this CPU (what the eager and the compiled loss of a transformers Llama save for
backward, each storage once), the eager model's loss and gradients, and planner/memory/loss_kernels.py's bytes per
logit, which the plan's count is made of."""

from __future__ import annotations

import json

import pytest
import torch

from planner.memory.loss_kernels import LossKernel, loss_bytes

BATCH, SEQ, VOCAB = 2, 64, 1000


def _llama_pair():
    """A tiny Llama in bf16 twice, the same weights; the second with its loss compiled, its blocks eager."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from backends.parts.kernels import compile_loss

    config = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=4, vocab_size=VOCAB, max_position_embeddings=128)  # fmt: skip
    torch.manual_seed(0)
    eager = LlamaForCausalLM(config).to(torch.bfloat16)
    compiled = LlamaForCausalLM(config).to(torch.bfloat16)
    compiled.load_state_dict(eager.state_dict())
    compile_loss(compiled)
    return eager, compiled


def _saved_bytes(model, ids: torch.Tensor) -> tuple[int, torch.Tensor]:
    """Bytes autograd keeps for the step's backward (each storage once), and the loss."""
    storages: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storages[tensor.untyped_storage().data_ptr()] = tensor.untyped_storage().nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        loss = model(input_ids=ids, labels=ids).loss
    return sum(storages.values()), loss


def test_the_compiled_loss_keeps_the_16_bit_logits_in_place_of_the_fp32_log_softmax():
    """The whole model's saved tensors, eager against compiled loss: the fp32 log-softmax (4 bytes a logit) and the
    shifted labels give way to the bf16 logits (2), each row's max and logsumexp (fp32) and the padded labels (one
    int64 more a sequence: transformers pads before it shifts). The blocks save the same. Loss and gradients are
    eager's."""
    eager, compiled = _llama_pair()
    ids = torch.randint(0, VOCAB, (BATCH, SEQ), generator=torch.Generator().manual_seed(1))
    eager_saved, eager_loss = _saved_bytes(eager, ids)
    compiled_saved, compiled_loss = _saved_bytes(compiled, ids)
    rows, logits = BATCH * SEQ, BATCH * SEQ * VOCAB
    per_logit = loss_bytes(LossKernel.EAGER, 2).saved - loss_bytes(LossKernel.FUSED, 2).saved
    assert eager_saved - compiled_saved == per_logit * logits - (4 + 4) * rows - 8 * BATCH
    assert compiled_loss.item() == pytest.approx(eager_loss.item(), rel=1e-5)
    eager_loss.backward()
    compiled_loss.backward()
    for (name, ours), theirs in zip(compiled.named_parameters(), eager.parameters()):
        assert ours.grad is not None and theirs.grad is not None, name
        torch.testing.assert_close(ours.grad, theirs.grad, rtol=2e-2, atol=1e-4, msg=name)


def test_the_runner_compiles_the_loss_with_the_blocks():
    """apply_kernels("compile") puts transformers' loss_function under torch.compile beside every block; "eager"
    leaves it alone."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from backends.parts.kernels import apply_kernels

    def model():
        return GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=64, n_positions=64))

    compiled = apply_kernels(model(), "compile", "cpu")
    assert hasattr(compiled.loss_function, "_torchdynamo_orig_callable")
    assert all(hasattr(block, "_compiled_call_impl") for block in compiled.transformer.h)
    assert not hasattr(apply_kernels(model(), "eager", "cpu").loss_function, "_torchdynamo_orig_callable")


def test_context_parallels_loss_compiles_to_the_same_fused_kernel():
    """Under context parallelism the engine computes the loss itself (summed over this rank's positions); under
    compile it runs compiled too. Eager saves the fp32 log-softmax, the targets and nll_loss's total weight; compiled,
    the bf16 logits, each row's max and logsumexp (fp32) and the targets. The same sum."""
    from backends.context_parallel.apply import summed_token_loss
    from backends.parts.kernels import compiled_or_eager

    assert compiled_or_eager(summed_token_loss, "eager") is summed_token_loss
    torch.manual_seed(0)
    logits = torch.randn(BATCH, SEQ, VOCAB, dtype=torch.bfloat16, requires_grad=True)
    targets = torch.randint(0, VOCAB, (BATCH, SEQ))
    rows, count = BATCH * SEQ, BATCH * SEQ * VOCAB
    expected = {
        "eager": loss_bytes(LossKernel.EAGER, 2).saved * count + 8 * rows + 4,
        "compile": loss_bytes(LossKernel.FUSED, 2).saved * count + (4 + 4 + 8) * rows,
    }
    losses = {}
    for kernels, saved_bytes in expected.items():
        storages: dict[int, int] = {}

        def pack(tensor: torch.Tensor, storages=storages) -> torch.Tensor:
            storages[tensor.untyped_storage().data_ptr()] = tensor.untyped_storage().nbytes()
            return tensor

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            losses[kernels] = compiled_or_eager(summed_token_loss, kernels)(logits, targets)
        assert sum(storages.values()) == saved_bytes, kernels
    assert losses["compile"].item() == pytest.approx(losses["eager"].item(), rel=1e-5)


def test_parallelize_compiles_context_parallels_loss_under_compile(monkeypatch):
    """parallelize's context-parallel branch, single-process: the engine's own loss is compiled under compile (the
    ranks and the ring attention, which need a process group, stubbed out) and left alone under eager."""
    from types import SimpleNamespace

    from transformers import GPT2Config, GPT2LMHeadModel

    import backends.parallelize as parallelize_module
    from backends.context_parallel.apply import summed_token_loss
    from backends.parallel_dims import ParallelDims

    def stub(model, layout, weights, device):
        return parallelize_module.Parallelized(model, context_parallel=SimpleNamespace(token_loss=summed_token_loss))

    monkeypatch.setattr(parallelize_module, "_context_parallel", stub)
    for kernels, compiled in (("compile", True), ("eager", False)):
        model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=64, n_positions=64))
        config = parallelize_module.ParallelizeConfig(kernels=kernels)
        placed = parallelize_module.parallelize(model, ParallelDims(cp=2), config)
        assert hasattr(placed.context_parallel.token_loss, "_torchdynamo_orig_callable") is compiled, kernels


def _estimate(capsys, model: str, kernels: str) -> dict:
    from hardware_selector_cli.app import main

    argv = ["estimate", "-m", model, "--gpu", "H100-80GB", "--gpus-per-node", "8", "--strategy", "fsdp", "--seq-len",
            "4096", "--micro-batch", "2", "--ac", "full", "--kernels", kernels, "--json"]  # fmt: skip
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)["memory"]


def test_the_plan_counts_the_compiled_loss_for_decoder_only_models(capsys):
    """`estimate --kernels compile`: a Llama's temporaries hold 8 bytes a logit less than eager's at the peak
    (12 -> 4 while the loss's backward runs), and the source names the fused kernel; a T5, whose loss is computed
    inline, is counted as eager under both."""
    eager, compiled = _estimate(capsys, "llama-3.1-8b", "eager"), _estimate(capsys, "llama-3.1-8b", "compile")
    logits = 2 * 4096 * 128256  # Llama 3's vocabulary
    drop = loss_bytes(LossKernel.EAGER, 2).backward_start - loss_bytes(LossKernel.FUSED, 2).backward_start
    assert eager["per_gpu_bytes"]["temporaries"] - compiled["per_gpu_bytes"]["temporaries"] == pytest.approx(
        drop * logits, rel=0.01
    )
    assert "fused cross-entropy kernel" in compiled["sources"]["temporaries"]
    assert "fp32 log-softmax" in eager["sources"]["temporaries"]
    t5_eager, t5_compiled = _estimate(capsys, "t5-large", "eager"), _estimate(capsys, "t5-large", "compile")
    assert t5_compiled["per_gpu_bytes"]["temporaries"] == t5_eager["per_gpu_bytes"]["temporaries"]
    assert "fp32 log-softmax" in t5_compiled["sources"]["temporaries"]


def test_ours_states_its_compiled_loss_once():
    """The memory estimate's default stack (OURS) is our preset's, compiled loss and all: one rule, two names."""
    from planner.memory.stack_memory import OURS
    from planner.throughput.implementation import OUR_STRATEGIES

    assert OUR_STRATEGIES.stack_memory() == OURS and OURS.compiles_loss


def test_compile_with_tensor_or_pipeline_parallelism_is_refused_for_our_engine(capsys):
    """backends/parallelize.py runs tp/pp-split models eager only, so the planner neither estimates (one line, exit 2)
    nor searches them under --kernels compile for ours, and says why; torchtitan's preset compiles them."""
    from hardware_selector_cli.app import main

    base = ["-m", "llama-3.1-8b", "--gpu", "H100-80GB", "--gpus-per-node", "8", "--kernels", "compile"]
    assert main(["estimate", *base, "--strategy", "engine", "--tp", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--kernels compile with --tp/--pp" in err[0]
    assert main(["estimate", *base, "--strategy", "engine", "--tp", "2", "--implementation", "torchtitan"]) == 0
    capsys.readouterr()
    assert main(["plan", *base, "--nodes", "2", "--strategies", "engine,fsdp", "--json"]) == 0
    plans = json.loads(capsys.readouterr().out)
    layouts = [plan["config"]["layout"] for plan in plans["candidates"]]
    assert layouts and all(layout.get("tp", 1) == 1 and layout.get("pp", 1) == 1 for layout in layouts)
    # A dense model at 2k tokens has no engine layout left (no EP, no CP): the whole engine family is ruled out,
    # and `--strategies engine` alone is one line (an audit), where an MoE model keeps its unsplit EP layouts.
    assert plans["rejected"]["engine (TP/PP)"].startswith("--kernels compile: our engine compiles")
    assert main(["plan", *base, "--nodes", "2", "--strategies", "engine"]) == 2
    assert "--strategies engine leaves nothing to search (engine (TP/PP): --kernels compile" in capsys.readouterr().err
    moe = ["plan", "-m", "qwen3-30b-a3b", *base[2:], "--nodes", "2", "--strategies", "engine", "--json"]
    assert main(moe) == 0
    moe_plans = json.loads(capsys.readouterr().out)
    assert moe_plans["best"]["config"]["layout"]["ep"] > 1
    assert moe_plans["rejected"]["engine TP/PP under --kernels"].startswith("--kernels compile: our engine")


def test_liger_under_context_parallelism_counts_the_whole_logits(capsys):
    """Under context parallelism our engine takes the logits from the model and computes its own loss (its Liger
    patches never see labels there), so `--kernels liger` keeps the whole logits: the same loss memory as eager."""
    from hardware_selector_cli.app import main

    def temporaries(kernels: str, cp: int) -> int:
        argv = ["estimate", "-m", "llama-3.1-8b", "--gpu", "H100-80GB", "--gpus-per-node", "8", "--strategy",
                "engine", "--cp", str(cp), "--seq-len", "32768", "--micro-batch", "1", "--kernels", kernels,
                "--json"]  # fmt: skip
        assert main(argv) == 0
        return json.loads(capsys.readouterr().out)["memory"]["per_gpu_bytes"]["temporaries"]

    assert temporaries("liger", 2) == temporaries("eager", 2)
    assert temporaries("liger", 1) < temporaries("eager", 1) / 4  # without cp, Liger's chunks
