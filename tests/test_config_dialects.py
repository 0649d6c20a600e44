"""A seed library's config, passed to our engine as its user wrote it, means what it meant there.

The reference for each example is the same config written in our own vocabulary: both load to the same
effective EngineConfig, train the same losses, and the seed one's start-up line says what each key became
(planner/contract/config_dialects.py, docs/engine.md "Configs from other libraries"). Bad values and keys
without an equivalent are one line naming the key; `initialize(..., pipeline=True)` pipelines over the ranks,
checked on 2 ranks against the layout {"pp": 2} (tests/engine_jobs/pipeline_flag.py).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

import backends
from planner.contract.config_dialects import SEED_KEYS
from planner.contract.engine_config import key_fates_line, load_engine_config
from planner.errors import UserInputError
from tests.distributed import run_torchrun

DOC = "(docs/engine.md, Configs from other libraries)"

# name: (the seed-style config as written, the same config in our vocabulary, the start-up line it prints)
EXAMPLES = {
    "flat training dict": (
        {"batch_size": 2, "zero_stage": 2, "fp16": True, "gradient_accumulation_steps": 2, "save_dir": "checkpoints"},
        {
            "train_micro_batch_size_per_gpu": 2,
            "zero_optimization": {"stage": 2},
            "fp16": {"enabled": True},
            "gradient_accumulation_steps": 2,
            "hardware_selector": {"checkpoint": {"save_dir": "checkpoints"}},
        },
        "Config keys: batch_size became train_micro_batch_size_per_gpu 2; zero_stage became zero_optimization.stage "
        "2; fp16 became fp16.enabled true; save_dir became hardware_selector.checkpoint.save_dir checkpoints " + DOC,
    ),
    "offload and communication blocks": (
        {
            "batch_size": 2,
            "zero_stage": 1,
            "cpu_offload": {"enabled": True, "pin_memory": False},
            "cpu_offload_params": {"enabled": False},
            "communication": {"backend": "gloo", "data_type": "bf16", "overlap": False, "bucket_size": 4096},
        },
        {
            "train_micro_batch_size_per_gpu": 2,
            "zero_optimization": {
                "stage": 1,
                "offload_optimizer": {"device": "cpu", "pin_memory": False},
                "overlap_comm": False,
                "reduce_bucket_size": 4096,
            },
            "communication_data_type": "bf16",
            "hardware_selector": {"dist_backend": "gloo"},
        },
        "Config keys: batch_size became train_micro_batch_size_per_gpu 2; zero_stage became zero_optimization.stage "
        "1; cpu_offload became zero_optimization.offload_optimizer.device cpu, zero_optimization.offload_optimizer."
        "pin_memory false; communication became hardware_selector.dist_backend gloo, communication_data_type bf16, "
        "zero_optimization.overlap_comm false, zero_optimization.reduce_bucket_size 4096; dropped (no effect on "
        "what is trained): cpu_offload_params " + DOC,
    ),
    "compression and profiling blocks": (
        {
            "batch_size": 2,
            "zero_stage": 2,
            "bf16": True,
            "compression": {"enabled": True, "type": "int8"},
            "profiling": {"enabled": True, "step": 1, "output_dir": "profiles"},
        },
        {
            "train_micro_batch_size_per_gpu": 2,
            "zero_optimization": {"stage": 2},
            "bf16": {"enabled": True},
            "hardware_selector": {"compression": "int8", "profiling": {"step": 1, "output": "profiles"}},
        },
        "Config keys: batch_size became train_micro_batch_size_per_gpu 2; zero_stage became zero_optimization.stage "
        "2; bf16 became bf16.enabled true; compression became hardware_selector.compression int8; profiling became "
        "hardware_selector.profiling {step: 1, output: profiles} " + DOC,
    ),
}


@pytest.mark.parametrize("name", EXAMPLES)
def test_a_seed_config_loads_as_the_same_config_in_our_words_and_says_what_each_key_became(name):
    seed, ours, line = EXAMPLES[name]
    translated = load_engine_config(seed)
    assert translated.model_dump() == load_engine_config(ours).model_dump()
    assert key_fates_line(translated) == line
    assert key_fates_line(load_engine_config(ours)) is None  # our own words need no translation


def _tiny_gpt2() -> torch.nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=64, n_positions=32))


def _losses(config: dict) -> tuple[list[float], object]:
    engine, *_ = backends.initialize(model=_tiny_gpt2(), config=config)
    data = torch.randint(0, 64, (2, 2, 2, 16), generator=torch.Generator().manual_seed(1))  # step, accum, micro
    return [engine.train_batch(iter(list(batch.unbind(0)))) for batch in data], engine


@pytest.mark.parametrize("name", EXAMPLES)
def test_each_seed_example_trains_as_written_like_its_reference(name, tmp_path, monkeypatch, capsys):
    """The example as its user runs it (relative folders in the folder they stand in): the same losses as the
    config written in our words, the translation printed once, and what save_dir / profiling ask for written."""
    seed, ours, line = EXAMPLES[name]
    monkeypatch.chdir(tmp_path)
    losses, engine = _losses(seed)
    assert capsys.readouterr().out.splitlines() == [line]
    assert losses == _losses(ours)[0]
    if "save_dir" in seed:
        engine.save_checkpoint()  # DeepSpeed needs a folder; the seed config named it
        assert (tmp_path / seed["save_dir"] / "latest").read_text().strip() == "global_step2"
        assert engine.load_checkpoint()[0] is not None
    if "profiling" in seed:
        assert (tmp_path / "profiles" / "step1-rank0.json").is_file()


def test_without_a_folder_in_the_call_or_the_config_a_checkpoint_is_one_line():
    engine, *_ = backends.initialize(model=torch.nn.Linear(4, 1), config={"train_batch_size": 1})
    with pytest.raises(UserInputError, match="pass one, or set hardware_selector.checkpoint.save_dir"):
        engine.save_checkpoint()


BAD = [
    ({"zero_stage": 7}, "zero_stage must be one of 0, 1, 2, 3, not 7"),
    ({"zero_stage": "2"}, "zero_stage must be one of 0, 1, 2, 3, not '2'"),
    ({"zero_stage": True}, "zero_stage must be one of 0, 1, 2, 3, not True"),
    ({"batch_size": -1}, "batch_size must be at least 1, not -1"),
    ({"batch_size": "4"}, "batch_size must be a whole number, not '4'"),
    ({"fp16": "yes"}, "fp16 must be true or false \\(or DeepSpeed's fp16 block\\), not 'yes'"),
    ({"save_dir": ""}, "save_dir must be a folder path"),
    ({"cpu_offload": "cpu"}, "cpu_offload must be true, false or a block, not 'cpu'"),
    ({"cpu_offload": {"enabled": "yes"}}, "cpu_offload.enabled must be true or false, not 'yes'"),
    ({"communication": {"backend": "mpi"}}, "communication.backend must be one of gloo, nccl, not 'mpi'"),
    ({"communication": {"hierarchical": True}}, "communication.hierarchical is not a key of communication; it takes"),
    ({"profiling": {"step": 0}}, "profiling.step must be at least 1, not 0"),
    ({"compression": {"enabled": True}}, "compression type None has no equivalent .* accepted types: fp32"),
]


@pytest.mark.parametrize(("config", "message"), BAD, ids=[str(config) for config, _ in BAD])
def test_a_bad_seed_value_is_one_line_naming_the_key_and_what_it_accepts(config, message):
    with pytest.raises(UserInputError) as refused:
        load_engine_config(config)
    assert re.search(message, str(refused.value)) and "\n" not in str(refused.value)


@pytest.mark.parametrize(
    ("config", "nearest"),
    [
        ({"cpu_offload_params": True}, "the nearest is cpu_offload, our zero_optimization.offload_optimizer"),
        ({"cpu_offload_params": {"enabled": True, "pin_memory": True}}, "the nearest is cpu_offload"),
        ({"compression": {"enabled": True, "type": "topk"}}, "the nearest is hardware_selector.compression 'int8'"),
        ({"compression": "powersgd"}, "the nearest is hardware_selector.compression 'int8'"),
    ],
)
def test_a_seed_key_without_an_equivalent_is_one_line_naming_the_nearest(config, nearest):
    with pytest.raises(UserInputError, match=f"has no equivalent in our engine.*{re.escape(nearest)}"):
        load_engine_config(config)


def test_the_seeds_1bit_compression_is_our_onebit():
    # onebit is 1-bit Adam, which needs its warm-up (freeze_step) set: the seed has no key for it, ours does.
    seed = {"compression": {"enabled": True, "type": "1bit"}}
    assert load_engine_config({**seed, "hardware_selector": {"compression_warmup_steps": 40}}).gradient_compression == (
        "onebit"
    )
    with pytest.raises(UserInputError, match="set it to 1 or more"):
        load_engine_config(seed)


def test_a_seed_key_and_ours_set_differently_is_one_line_and_set_alike_is_taken():
    with pytest.raises(UserInputError, match="zero_stage sets zero_optimization.stage 2, and the config sets "):
        load_engine_config({"zero_stage": 2, "zero_optimization": {"stage": 3}})
    both = load_engine_config({"batch_size": 2, "train_micro_batch_size_per_gpu": 2, "zero_optimization": {}})
    assert both.train_micro_batch_size_per_gpu == 2
    assert load_engine_config({"fp16": {"enabled": True}}).fp16.enabled  # DeepSpeed's block is not translated


def test_every_seed_key_is_in_the_docs_table():
    doc = (Path(__file__).resolve().parent.parent / "docs" / "engine.md").read_text()
    section = doc.split("## Configs from other libraries", 1)[1].split("\n## ", 1)[0]
    first_cells = " ".join(row.split("|")[1] for row in section.splitlines() if row.startswith("| `"))
    assert [key for key in SEED_KEYS if f"`{key}`" not in first_cells] == []
    assert "pipeline=True" in first_cells


def test_pipeline_true_becomes_the_pp_layout_where_the_engine_pipelines_the_model():
    from backends.engine.initialize_args import with_pipeline_flag

    seed = with_pipeline_flag(load_engine_config({"batch_size": 2}), True, _tiny_gpt2(), world_size=2)
    ours = load_engine_config({"train_micro_batch_size_per_gpu": 2, "hardware_selector": {"layout": {"pp": 2}}})
    assert seed.model_dump() == ours.model_dump()
    assert key_fates_line(seed) == (
        "Config keys: batch_size became train_micro_batch_size_per_gpu 2; pipeline=True became "
        "hardware_selector.layout.pp 2 " + DOC
    )
    kept = with_pipeline_flag(ours, True, _tiny_gpt2(), world_size=4)
    assert kept.hardware_selector.layout == ours.hardware_selector.layout
    assert with_pipeline_flag(ours, False, _tiny_gpt2(), world_size=4) is ours


@pytest.mark.parametrize(
    ("model", "pipeline", "message"),
    [
        (torch.nn.Linear(4, 1), True, "pipelines Hugging Face models of .*this Linear is not one; drop pipeline=True"),
        (
            None,
            True,
            "1 rank\\(s\\) over 1 per stage \\(dp x tp x cp\\) make no 2 stages; start it under torchrun --nproc_per_node=2",
        ),
        (None, "yes", "initialize's pipeline must be True or False, not 'yes'"),
    ],
)
def test_pipeline_true_that_cannot_pipeline_is_one_line_saying_what_to_do(model, pipeline, message):
    with pytest.raises(UserInputError) as refused:
        backends.initialize(model=model or _tiny_gpt2(), config={"train_batch_size": 2}, pipeline=pipeline)
    assert re.search(message, str(refused.value)) and "\n" not in str(refused.value)


@pytest.mark.slow
def test_initialize_with_pipeline_true_trains_on_two_ranks_as_the_pp2_layout(tmp_path):
    out = tmp_path / "out.json"
    run_torchrun(["tests/engine_jobs/pipeline_flag.py", str(out)], nproc=2)
    result = json.loads(out.read_text())
    assert result["seed"]["pp"] == result["ours"]["pp"] == 2
    assert result["seed"]["losses"] == result["ours"]["losses"]
    assert result["seed"]["printed"].splitlines() == [
        "Config keys: batch_size became train_micro_batch_size_per_gpu 2; zero_stage became zero_optimization.stage "
        "1; pipeline=True became hardware_selector.layout.pp 2 " + DOC
    ]
    assert result["ours"]["printed"] == ""


def test_an_optimizer_object_beside_a_seed_config_keeps_its_start_up_line(capsys):
    """The object's hyperparameters replace the optimizer block; what the seed keys became is still said."""
    model = _tiny_gpt2()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    engine, *_ = backends.setup_distributed_training(model, {"batch_size": 2, "zero_stage": 1}, optimizer=optimizer)
    assert (engine.config.optimizer.type, engine.config.optimizer.params.lr) == ("SGD", 0.5)
    assert capsys.readouterr().out.splitlines() == [
        "Config keys: batch_size became train_micro_batch_size_per_gpu 2; zero_stage became zero_optimization.stage "
        "1 " + DOC
    ]
