"""`hardware-selector plan` (and the throughput block of `estimate --json`): shape, errors, lazy imports; --emit
and --report from the command line are tests/test_plan_emit_cli.py's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hardware_selector_cli.app import main
from planner.training_config import TrainingConfig

REPO_ROOT = Path(__file__).resolve().parent.parent
HEAVY_MODULES = ("torch", "transformers", "deepspeed", "accelerate")
PLAN_ARGS = [
    "plan",
    "--model",
    "llama-2-7b",
    "--gpu",
    "H100-80GB",
    "--gpus-per-node",
    "8",
    "--nodes",
    "4",
    "--global-batch",
    "1024",
    "--seq-len",
    "4096",
]


def _json(capsys, argv: list[str]) -> dict:
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_plan_json_has_best_candidates_and_rejected_with_full_plans(capsys):
    document = _json(capsys, [*PLAN_ARGS, "--json", "--top", "3"])
    assert {"best", "candidates", "rejected"} <= document.keys()
    assert document["best"] == document["candidates"][0]
    assert 1 <= len(document["candidates"]) <= 3
    for plan in document["candidates"]:
        assert plan["strategy"] and plan["reasons"]
        config = TrainingConfig.model_validate(plan["config"])  # the full config round-trips
        dp = plan["layout"]["dp"]
        assert config.micro_batch * config.grad_accum * dp == 1024
        assert plan["memory"]["fits"] and plan["memory"]["per_gpu_bytes"]["total"] > 0
        for key in ("step_time_s", "tokens_per_s", "tflops_per_gpu", "mfu", "hfu"):
            assert plan["throughput"][key] > 0
    strategies = {plan["strategy"] for plan in document["candidates"]}
    assert len(strategies) == len(document["candidates"])  # one plan per strategy family
    assert document["best"]["strategy"] not in document["rejected"]  # every other family has its fate
    assert all(isinstance(line, str) and "\n" not in line for line in document["rejected"].values())


def test_plan_table_shows_the_best_plan_and_its_reasons(capsys):
    assert main([*PLAN_ARGS, "--top", "2"]) == 0
    out = " ".join(capsys.readouterr().out.split())  # rich wraps lines at the terminal width
    assert "tokens/s" in out and "MFU" in out and "because:" in out and "other strategies:" in out
    assert "source of memory: formula" in out and "source of throughput:" in out
    assert main([*PLAN_ARGS, "--top", "2", "--explain"]) == 0
    explained = " ".join(capsys.readouterr().out.split())
    assert explained.count("because:") == 2 and "[memory: formula" in explained
    assert "optimizer_states:" in explained  # each plan's memory categories with their sources


def test_plan_objective_cost_may_use_fewer_gpus_and_reports_cost(capsys):
    document = _json(capsys, [*PLAN_ARGS, "--json", "--objective", "cost"])
    assert document["objective"] == "cost"
    best = document["best"]
    assert best["cluster"]["num_nodes"] <= 4
    assert any("to train" in reason and "$" in reason for reason in best["reasons"])


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--gpu", "Z900"], "unknown GPU"),
        (["--objective", "fastest"], "--objective must be one of"),
        (["--micro-batch", "3"], "is not a multiple of --micro-batch"),
        (["--strategies", "ddp,megatron"], "--strategies must be one of"),
        (["--headroom", "1.5"], "--headroom"),
        # Shape flags with a named model used to be dropped without a word.
        (["--kv-heads", "8"], "--kv-heads shapes a model given by its dimensions"),
        (["--experts", "8", "--top-k", "2"], "--experts, --top-k shape a model"),
        (["--mlp", "standard"], "with --model they would be ignored"),
        (["--no-offload", "--nvme-gb", "2000"], "--nvme-gb 2000 offers NVMe to offload to, and --no-offload leaves"),
        # A flag that applies to nothing asked for was dropped, or searched to "nothing fits".
        (["--force"], "--force replaces the files of an emitted folder; add --emit DIR"),
        (["--strategies", "engine", "--lora-rank", "8"], "--strategies engine leaves nothing to search (engine"),
        (
            ["--strategies", "engine", "--kernels", "compile"],
            "leaves nothing to search (engine (TP/PP): --kernels compile",
        ),
        (["--mode", "inference", "--elastic", "2:4"], "--elastic: training only, and --mode inference plans serving"),
        # An empty text value (an unset shell variable) read as the flag left out: --gpu "" planned this machine.
        (["--gpu", ""], "--gpu is empty; give it a value, or leave it out"),
        (["--interconnect", " "], "--interconnect is empty"),
    ],
)
def test_bad_plan_input_is_one_line_and_exit_2(capsys, extra, message):
    assert main([*PLAN_ARGS, *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and message in err and "\n" not in err


def test_bad_seq_len_for_learned_positions_is_one_line(capsys):
    assert main(["plan", "--model", "gpt2", "--gpu", "A100-40GB", "--seq-len", "4096"]) == 2
    assert "learned positions" in capsys.readouterr().err


def test_seq_len_defaults_to_the_models_context_when_shorter_than_2048(capsys):
    document = _json(capsys, ["plan", "--model", "gpt2", "--gpu", "A100-40GB", "--gpus-per-node", "2", "--json"])
    assert document["best"]["config"]["seq_len"] == 1024  # gpt2's 1024 learned positions, not 2048
    document = _json(capsys, ["estimate", "--model", "gpt2", "--gpu", "A100-40GB", "--json"])
    assert document["config"]["seq_len"] == 1024
    document = _json(capsys, ["plan", "--model", "llama-2-7b", "--gpu", "A100-80GB", "--json", "--top", "1"])
    assert document["best"]["config"]["seq_len"] == 2048  # a 4096 context: capped at 2048


@pytest.mark.parametrize(
    "argv",
    [
        # Offload labels are the longest names the table shows.
        ["--model", "llama-2-70b", "--gpu", "A100-80GB", "--nodes", "2", "--top", "8"],
        ["--model", "llama-3-8b", "--gpu", "A100-80GB", "--gpus-per-node", "4", "--objective", "time-to-train"],
        PLAN_ARGS[1:],
    ],
)
def test_plan_table_fits_80_columns_without_cut_off_names(monkeypatch, capsys, argv):
    from planner.search.strategy_layout import family_label

    monkeypatch.setenv("COLUMNS", "80")
    assert main(["plan", *argv, "--json"]) == 0
    labels = [
        family_label(TrainingConfig(**plan["config"])) for plan in json.loads(capsys.readouterr().out)["candidates"]
    ]
    assert main(["plan", *argv]) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 80
    assert "…" not in out  # rich marks a cut-off cell with an ellipsis
    flat = " ".join(out.split())
    for label in labels:
        assert label in flat, label  # wrapped onto two lines at most, never shortened


def test_estimate_json_gains_throughput(capsys):
    document = _json(
        capsys, ["estimate", "--model", "llama-2-7b", "--gpu", "A100-80GB", "--strategy", "zero3", "--json"]
    )
    throughput = document["throughput"]
    for key in ("step_time_s", "tokens_per_s", "tflops_per_gpu", "mfu", "hfu"):
        assert throughput[key] > 0
    assert 0 < throughput["mfu"] <= throughput["hfu"] < 1


PROBE = """
import sys
from hardware_selector import main
code = main({argv!r})
heavy = sorted(name for name in {heavy!r} if name in sys.modules)
print("HEAVY=" + ",".join(heavy), file=sys.stderr)
sys.exit(code)
"""


def test_planning_a_catalog_model_imports_no_heavy_library():
    argv = [*PLAN_ARGS, "--json"]
    completed = subprocess.run(
        [sys.executable, "-c", PROBE.format(argv=argv, heavy=HEAVY_MODULES)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert completed.returncode == 0, completed.stderr
    assert completed.stderr.strip().splitlines()[-1] == "HEAVY=", completed.stderr
    assert json.loads(completed.stdout)["best"] is not None


def test_plan_without_gpu_plans_for_the_detected_machine(monkeypatch, capsys):
    from planner.hardware.launch_context import SLURM_VARIABLES, TORCHRUN_VARIABLES
    from tests.fakes.fake_pynvml import dgx_a100, install

    for name in (*SLURM_VARIABLES, *TORCHRUN_VARIABLES):  # one node, whatever launched the tests
        monkeypatch.delenv(name, raising=False)
    install(monkeypatch, dgx_a100())
    document = _json(capsys, ["plan", "--model", "llama-2-7b", "--seq-len", "2048", "--json", "--top", "1"])
    cluster = document["best"]["cluster"]
    assert cluster["gpu"]["name"] == "A100-80GB" and cluster["gpus_per_node"] == 8
    assert cluster["assumptions"][0].startswith("detected 8 x")


def test_the_detected_machine_takes_the_nodes_gpus_and_ram_the_user_states(monkeypatch, capsys):
    """A new user's audit: on a detected 8-GPU node, --gpus-per-node 4 --nodes 2 --cpu-ram-gb 2048 planned 8 GPUs on
    the host's own RAM, and "nothing fits" advised those very flags (re-running them changed nothing). What is
    given wins, a launcher's node count included; more GPUs per node than the node has is one line."""
    from planner.hardware.launch_context import SLURM_VARIABLES, TORCHRUN_VARIABLES
    from tests.fakes.fake_pynvml import dgx_a100, install

    for name in (*SLURM_VARIABLES, *TORCHRUN_VARIABLES):
        monkeypatch.delenv(name, raising=False)
    install(monkeypatch, dgx_a100())
    base = ["plan", "--model", "llama-2-7b", "--seq-len", "2048", "--json", "--top", "1"]
    cluster = _json(capsys, [*base, "--gpus-per-node", "4", "--nodes", "2", "--cpu-ram-gb", "2048"])["best"]["cluster"]
    assert (cluster["gpus_per_node"], cluster["num_nodes"], cluster["cpu_ram_per_node_bytes"]) == (4, 2, 2048 * 2**30)
    assert cluster["assumptions"][0].startswith("detected 8 x")
    monkeypatch.setenv("SLURM_NNODES", "4")
    assert _json(capsys, [*base, "--nodes", "1"])["best"]["cluster"]["num_nodes"] == 1
    assert main([*base, "--gpus-per-node", "16"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--gpus-per-node 16: this node has 8 x A100-80GB; pass 8 or fewer" in err and "\n" not in err
    # estimate plans this machine as plan does (it refused without --gpu): the same cluster from the same flags
    estimate = ["estimate", "--model", "llama-2-7b", "--strategy", "fsdp", "--json", "--gpus-per-node", "4"]
    assert main(estimate) == 0
    cluster = json.loads(capsys.readouterr().out)["cluster"]
    assert (cluster["gpu"], cluster["gpus_per_node"], cluster["world_size"]) == ("A100-80GB", 4, 16)  # SLURM: 4 nodes


def test_plan_without_gpu_on_a_cpu_only_machine_is_a_one_line_error(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # `import pynvml` fails: no GPUs visible
    assert main(["plan", "--model", "gpt2"]) == 2
    assert "no GPU detected here; name the target GPU with --gpu" in capsys.readouterr().err


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_strategies_zero_n_plans_deepspeed_at_that_stage_only(capsys, stage):
    """Pinning the stage leaves only DeepSpeed layouts at that stage among the candidates."""
    document = _json(capsys, [*PLAN_ARGS, "--json", "--strategies", f"zero{stage}"])
    best = document["best"]
    assert best["config"]["strategy"] == "deepspeed" and best["config"]["zero_stage"] == stage
    assert all(plan["config"]["zero_stage"] == stage for plan in document["candidates"])


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--strategies", "ddp,fsdp"], "--fsdp-sharding full pins FSDP's sharding, but --strategies also searches ddp"),
        (["--strategies", "zero3"], "but --strategies also searches zero3: use --strategies fsdp (or fsdp-full)"),
        (["--strategies", "fsdp-grad-op"], "--fsdp-sharding full conflicts with --strategies fsdp-grad-op"),
    ],
)
def test_fsdp_sharding_beside_another_strategy_is_one_line(capsys, flags, message):
    assert main([*PLAN_ARGS, *flags, "--fsdp-sharding", "full"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and message in err and "\n" not in err


def test_fsdp_sharding_alone_narrows_to_fsdp_and_hybrid_on_one_node_is_one_line_saying_why(capsys):
    best = _json(capsys, [*PLAN_ARGS, "--json", "--fsdp-sharding", "grad-op"])["best"]
    assert best["config"]["strategy"] == "fsdp" and best["config"]["fsdp_sharding"] == "grad-op"
    one_node = ["plan", "--model", "gpt2", "--gpu", "A100-80GB", "--gpus-per-node", "2", "--json"]
    assert main([*one_node, "--fsdp-sharding", "hybrid"]) == 2  # was "nothing fits", and suggestions
    err = capsys.readouterr().err.strip()
    assert "--strategies fsdp-hybrid leaves nothing to search" in err and "on one node it is full sharding" in err


def test_plan_help_names_the_report_extra_it_installs(monkeypatch, capsys):
    """Rich reads "[report]" in a help text as a style tag and drops it; the line must print the extra's name."""
    monkeypatch.setenv("COLUMNS", "250")
    assert main(["plan", "--help"]) == 0
    assert "pip install 'hardware-selector[report]'" in capsys.readouterr().out


def test_the_overhead_source_gives_the_numbers_it_is_made_of_and_no_flag_plan_lacks(capsys):
    """The overhead's source said "override with --overhead-gb", a flag `plan` refuses, and not what the figure
    is made of; it states the context and the fragmentation share, which reproduce the figure."""
    assert main([*PLAN_ARGS, "--json", "--top", "1"]) == 0
    memory = json.loads(capsys.readouterr().out)["best"]["memory"]
    source, per_gpu = memory["sources"]["overhead"], memory["per_gpu_bytes"]
    assert source == (
        "assumption: 0.75 GiB CUDA context + 5% of the tensors' memory as allocator fragmentation reserve "
        "(estimate --overhead-gb sets a flat figure)"
    )
    tensors = per_gpu["total"] - per_gpu["overhead"]
    assert per_gpu["overhead"] == int(0.75 * 2**30 + 0.05 * tensors)
    assert main(["estimate", "--model", "llama-2-7b", "--gpu", "H100-80GB", "--overhead-gb", "1.5", "--json"]) == 0
    assert (
        json.loads(capsys.readouterr().out)["memory"]["sources"]["overhead"]
        == "assumption: 1.5 GiB flat (--overhead-gb)"
    )


def test_the_engine_alone_on_one_gpu_is_one_line_saying_why_not_nothing_fits(capsys):
    """GPT-2 on one H100 with --strategies engine said "nothing fits", "2 x H100-80GB is the fewest that fits
    (memory: formula)" and suggested LoRA: the engine has no one-GPU layout, whatever the memory."""
    assert (
        main(["plan", "--model", "gpt2", "--gpu", "H100-80GB", "--gpus-per-node", "1", "--strategies", "engine"]) == 2
    )
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --strategies engine on 1 GPU: our engine's layouts split the model over 2 or more")
    assert "\n" not in err
    assert (
        main(["plan", "--model", "gpt2", "--gpu", "H100-80GB", "--gpus-per-node", "2", "--strategies", "engine"]) == 0
    )


def test_a_plan_that_is_the_only_fitting_candidate_says_so_in_the_singular(capsys):
    # It read "ranked 1st of 1 fitting candidates estimated" (an audit).
    argv = ["plan", "-m", "gpt2", "--gpu", "cpu", "--gpus-per-node", "1", "--strategies", "ddp", "--micro-batch", "1"]
    document = _json(capsys, [*argv, "--ac", "none", "--global-batch", "8", "--json"])
    assert "the only fitting candidate estimated, by throughput: " in " ".join(document["best"]["reasons"])
    assert "1st of 1" not in json.dumps(document)
    several = _json(capsys, [*PLAN_ARGS, "--json"])
    assert any(
        line.startswith("ranked ") and " fitting candidates estimated, by " in line
        for line in several["best"]["reasons"]
    )


def test_the_exit_status_answers_will_it_fit(capsys):
    """0 when a plan fits, 1 when nothing does (what would is printed), 2 for a mistake (docs/errors.md): a script
    or CI job can gate on `plan`, as on the seed command, for training and serving."""
    import json

    from hardware_selector_cli.app import main

    fits = ["plan", "--model", "llama-2-7b", "--gpu", "A100-80GB", "--no-calibration"]
    too_big = ["plan", "--model", "llama-3-70b", "--gpu", "T4", "--gpus-per-node", "1", "--no-calibration"]
    assert main(fits) == 0
    capsys.readouterr()
    assert main([*too_big, "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["best"] is None
    assert main(too_big) == 1 and "nothing fits" in capsys.readouterr().out
    serving = ["plan", "--mode", "inference", "--model", "llama-3-70b", "--gpu", "T4", "--gpus-per-node", "1"]
    assert main(serving) == 1 and "nothing fits" in capsys.readouterr().out
    assert main([*fits, "--global-batch", "0"]) == 2


def test_nothing_fits_with_emit_is_1_and_writes_nothing(tmp_path, capsys):
    """An audit: with --emit (or --elastic), nothing fitting was an `error:` and exit 2, the code for a mistake."""
    from hardware_selector_cli.app import main

    folder = tmp_path / "run"
    too_big = ["plan", "--model", "llama-3-70b", "--gpu", "T4", "--gpus-per-node", "1", "--no-calibration"]
    assert main([*too_big, "--emit", str(folder)]) == 1
    captured = capsys.readouterr()
    assert "nothing fits" in captured.out and captured.err == f"wrote nothing to {folder}: no plan fits\n"
    assert not folder.exists()
    # A run folder trains every weight (--emit refuses LoRA): its suggestions leave adapters out, plan's keep them.
    assert "--lora-rank" not in captured.out
    assert main(too_big) == 1 and "fine-tuning with --lora-rank" in capsys.readouterr().out
    assert main([*too_big, "--emit", str(folder), "--elastic", "1:2"]) == 1 and not folder.exists()


def test_plan_and_estimate_print_what_the_cluster_was_taken_to_be(capsys, monkeypatch):
    """docs/models-and-hardware.md: every assumed default is listed in ClusterSpec.assumptions "and printed with the
    plan"; an audit found them only in --json and --report. Both print them, last, one per line, as --json has them."""
    from planner.hardware.cluster import make_cluster

    monkeypatch.setenv("COLUMNS", "400")
    expected = make_cluster("H100-80GB", gpus_per_node=8, nodes=2).assumptions
    args = ["--model", "llama-3-8b", "--gpu", "H100-80GB", "--gpus-per-node", "8", "--nodes", "2", "--seq-len", "4096"]
    for command in (["plan", *args, "--global-batch", "64"], ["estimate", *args, "--strategy", "fsdp"]):
        assert main(command) == 0
        lines = capsys.readouterr().out.splitlines()
        start = lines.index("the cluster, as planned:")
        listed = [line.strip() for line in lines[start + 1 : start + 1 + len(expected)]]
        assert listed == [f"- {line}" for line in expected], command[0]
        assert any("inter-node: InfiniBand NDR" in line for line in listed)
        if command[0] == "estimate":
            assert start + len(expected) == len(lines) - 1  # last: no other bullet reads as the cluster's
