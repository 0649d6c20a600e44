"""plan.json's run.search (what the search that found the plan was kept to, which `tune RUN_DIR` searches again)
is the same for the same request, whether the folder is emitted by the CLI or by the Python API, and it keeps
--tokens (the budget time-to-train and cost rank by).

The reference is the request itself: its restrictions as planner/search/request.py states them.
"""

from __future__ import annotations

import json

from distributed import cli_in_process

PLAN = ["plan", "-m", "gpt2", "--gpu", "A100-80GB", "--gpus-per-node", "2", "--seq-len", "128"]


def _recorded(run_dir) -> dict:
    return json.loads((run_dir / "plan.json").read_text())["run"]["search"]


def test_the_api_and_the_cli_record_the_same_search_for_the_same_request(tmp_path):
    from hardware_selector import emit_run_folder, get_distributed_training_config

    config = get_distributed_training_config(
        "text_generation", "gpt2", gpu_count=2, batch_size=2, gpu="A100-80GB", seq_len=128, strategies=["FSDP"]
    )
    emit_run_folder(config["plan"], tmp_path / "api")
    cli = cli_in_process(*PLAN, "--strategies", "fsdp", "--micro-batch", "2", "--global-batch", "4",
                         "--emit", tmp_path / "cli")  # fmt: skip
    assert cli.returncode == 0, cli.stderr
    expected = {"strategies": ["fsdp"], "activation_checkpointing": ["none", "selective", "full"],
                "allow_offload": True, "micro_batch": 2, "objective": "throughput", "train_tokens": None}  # fmt: skip
    assert _recorded(tmp_path / "api") == _recorded(tmp_path / "cli") == expected


def test_tokens_are_recorded_and_tune_searches_with_them_again(tmp_path):
    from planner.rundir.plan_file import read_plan_file
    from planner.search.request import restricted_fields

    cli = cli_in_process(*PLAN, "--objective", "time-to-train", "--tokens", "3e9", "--emit", tmp_path / "run")
    assert cli.returncode == 0, cli.stderr
    assert _recorded(tmp_path / "run")["train_tokens"] == 3e9
    _, run = read_plan_file(tmp_path / "run")
    fields = restricted_fields(run.search)  # what `tune RUN_DIR` puts into its search request
    assert fields["train_tokens"] == 3e9 and fields["objective"].value == "time-to-train"
