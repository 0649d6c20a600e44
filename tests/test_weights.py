"""Reading a rank's part of a checkpoint: the same numbers as slicing the whole tensor, without reading the whole.

References: torch's own slicing of the full tensor (flat ranges), and the engine's
tensor_parallel.layers.shard_tensor / pad_rows (TP slices with fused sections, replicated KV heads and a
padded vocabulary), for every rank of the layout. Reads are counted: a rank's slice reads its rows only.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import save_file

from backends.tensor_parallel.layers import pad_rows, padded_vocab, shard_tensor
from backends.weights.sliced_load import read_local_slice
from backends.weights.source import WeightSource
from planner.errors import UserInputError

TENSORS = {
    "embed.weight": torch.randn(101, 8),  # a vocabulary tp does not divide
    "attn.c_attn.weight": torch.randn(8, 24),  # GPT-2 Conv1D: [in, 3 x out], q|k|v sections along dim 1
    "attn.k_proj.weight": torch.randn(4, 8),  # 2 key/value heads of 2 under tp 4: replicated in pairs
    "norm.bias": torch.randn(8),
    "experts.gate_up_proj": torch.randn(4, 16, 8),  # 4 experts' gate | up rows (ffn 8): over ep 2, then tp
}


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ckpt")
    save_file({name: tensor.contiguous() for name, tensor in TENSORS.items()}, str(folder / "model.safetensors"))
    return WeightSource(folder)


def model_part(tp: int, rank: int, ep_rank: int = 0) -> SimpleNamespace:
    return SimpleNamespace(
        shard_specs={
            "embed.weight": (0, 1),
            "attn.c_attn.weight": (1, 3),
            "attn.k_proj.weight": (0, 1),
            "experts.gate_up_proj": (1, 2),
        },
        tp_replicas={"attn.k_proj.weight": 2},
        padded_rows={"embed.weight": 101},
        groups=SimpleNamespace(dims=SimpleNamespace(tp=tp), tp_rank=rank),
        expert_parallel=SimpleNamespace(ep=2, ep_rank=ep_rank, expert_names={"experts.gate_up_proj"}),
    )


@pytest.mark.parametrize("tp", [2, 4])
def test_tp_slices_equal_the_engines_own_sharding(source, tp):
    """Expert tensors: this ep rank's run of experts (the dispatch's own, dim 0 chunked over ep), then its tp slice."""
    for rank, ep_rank in ((rank, ep_rank) for rank in range(tp) for ep_rank in range(2)):
        part = model_part(tp, rank, ep_rank)
        for name, (dim, sections) in part.shard_specs.items():
            full = TENSORS[name]
            if name in part.expert_parallel.expert_names:
                full = full.chunk(2)[ep_rank]
            replicas = part.tp_replicas.get(name, 1)
            expected = shard_tensor(
                pad_rows(full, padded_vocab(101, tp)) if name in part.padded_rows else full,
                dim,
                rank // replicas,
                tp // replicas,
                sections,
            )
            assert torch.equal(read_local_slice(part, source, name), expected), (name, tp, rank, ep_rank)


def test_flat_ranges_read_only_the_rows_that_hold_them(source, monkeypatch):
    full = TENSORS["attn.c_attn.weight"].reshape(-1)  # 192 elements, rows of 24
    for start, end in ((0, 5), (20, 50), (100, 192), (48, 72)):
        assert torch.equal(source.read_flat("attn.c_attn.weight", start, end), full[start:end])
    rows_read = []
    original = source.read
    monkeypatch.setattr(source, "read", lambda name, index=None: rows_read.append(index) or original(name, index))
    source.read_flat("attn.c_attn.weight", 20, 50)
    assert rows_read == [(slice(0, 3),)]  # rows 0-2 cover elements 20-49, not all 8 rows


def test_names_prefixes_tied_heads_and_mismatches(tmp_path):
    save_file({"wte.weight": torch.ones(4, 2), "h.0.bias": torch.zeros(2)}, str(tmp_path / "model.safetensors"))
    source = WeightSource(tmp_path, base_prefix="transformer", tied={"lm_head.weight": "transformer.wte.weight"})
    assert source.key_for("transformer.wte.weight") == "wte.weight"  # a base-model checkpoint in an LM head model
    assert source.key_for("lm_head.weight") == "wte.weight"  # the tied head is read from the embedding
    with pytest.raises(UserInputError, match="has shape \\[4, 2\\] but the config gives \\[4, 3\\]"):
        source.check_shape("transformer.wte.weight", (4, 3))
    with pytest.raises(UserInputError, match="no tensor 'transformer.h.1.bias'"):
        source.key_for("transformer.h.1.bias")


def test_a_folder_without_safetensors_is_refused_without_unpickling(tmp_path):
    (tmp_path / "pytorch_model.bin").write_bytes(b"not opened")
    with pytest.raises(UserInputError, match="pickle, not loaded for safety"):
        WeightSource(tmp_path)


def test_a_sharded_checkpoint_reads_like_a_single_file(tmp_path):
    """save_pretrained's own sharding (an index and several files) against the single-file save of the same model."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=64, n_positions=32, n_embd=32, n_layer=2, n_head=2))
    model.save_pretrained(tmp_path / "single")
    model.save_pretrained(tmp_path / "sharded", max_shard_size="20KB")
    assert len(list((tmp_path / "sharded").glob("model-*.safetensors"))) > 2
    single, sharded = WeightSource(tmp_path / "single"), WeightSource(tmp_path / "sharded")
    for name, param in model.named_parameters():
        assert torch.equal(sharded.read(name), single.read(name)) and torch.equal(sharded.read(name), param)


def test_an_export_above_the_shard_size_is_sharded_with_hfs_index(tmp_path, monkeypatch):
    from transformers import GPT2Config, GPT2LMHeadModel

    from backends.runner import export

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=64, n_positions=32, n_embd=32, n_layer=2, n_head=2))
    monkeypatch.setattr(export, "SHARD_BYTES", 20_000)
    state = {name: tensor for name, tensor in model.state_dict().items() if name != "lm_head.weight"}
    model.config.save_pretrained(tmp_path)
    export.write_weights(tmp_path, state)
    assert (tmp_path / "model.safetensors.index.json").is_file() and not (tmp_path / "model.safetensors").exists()
    loaded = GPT2LMHeadModel.from_pretrained(tmp_path)
    assert all(torch.equal(loaded.state_dict()[name], tensor) for name, tensor in model.state_dict().items())


@pytest.mark.parametrize("family", ["mixtral", "qwen2_moe"])
def test_moe_checkpoints_read_as_transformers_loads_them(tmp_path, family):
    """Reference: transformers' own from_pretrained, which fuses the checkpoint's per-expert matrices."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from backends.weights.source import source_for

    sizes = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, vocab_size=64)
    extra = (
        dict(intermediate_size=48, num_local_experts=4, num_experts_per_tok=2)
        if family == "mixtral"
        else dict(intermediate_size=64, moe_intermediate_size=24, shared_expert_intermediate_size=40, num_experts=4,
                  num_experts_per_tok=2)
    )  # fmt: skip
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(AutoConfig.for_model(family, **sizes, **extra)).save_pretrained(str(tmp_path))
    loaded = AutoModelForCausalLM.from_pretrained(str(tmp_path), dtype=torch.float32)
    source = source_for(loaded, tmp_path)
    assert "model.layers.0.mlp.experts.gate_up_proj" not in source.files  # stored per expert
    fused = 0
    for name, param in loaded.named_parameters():
        assert source.shape(name) == tuple(param.shape), name
        assert torch.equal(source.read(name), param.detach()), name
        fused += name.endswith(("gate_up_proj", "down_proj")) and param.dim() == 3
    assert fused == 4  # two layers' experts, each stored per expert in the checkpoint
    flat = loaded.model.layers[1].mlp.experts.gate_up_proj.detach().reshape(-1)
    assert torch.equal(source.read_flat("model.layers.1.mlp.experts.gate_up_proj", 100, 5000), flat[100:5000])
