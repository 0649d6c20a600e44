"""A new user's honest mistakes, from README.md and docs/running.md: each is one line on stderr starting
`error:` that says what is wrong and what to do, exit code 2, no traceback, and nothing written
(docs/errors.md). Each test here failed before its fix."""

from __future__ import annotations

import pytest

from tests.distributed import cli_in_process

EMIT = ["plan", "--model", "gpt2", "--gpu", "cpu", "--gpus-per-node", "2", "--seq-len", "64", "--global-batch", "4"]
NOTHING_FITS = ["plan", "--model", "llama-2-70b", "--gpu", "cpu", "--gpus-per-node", "2"]


def one_error_line(result) -> str:
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def test_negative_steps_at_emit_are_said_as_the_flag_not_a_request_field(tmp_path):
    """It read "error: train_tokens: Input should be greater than 0": the search planned -1 steps' tokens."""
    line = one_error_line(cli_in_process(*EMIT, "--strategies", "ddp", "--emit", tmp_path / "run", "--steps", "-1"))
    assert line == "error: --steps must be greater than or equal to 1, not -1"
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "flags, said",
    [
        (["--steps", "0"], "error: --steps must be greater than or equal to 1, not 0"),
        (["--lr", "-1"], "error: --lr must be greater than 0, not -1"),
        (["--eval-fraction", "1.5"], "error: --eval-fraction must be less than 1, not 1.5"),
    ],
)
def test_a_run_flag_out_of_range_is_a_mistake_even_where_nothing_fits(tmp_path, flags, said):
    """They exited 1, "wrote nothing to DIR: no plan fits": the answer for a plan, given for a typo, because the
    run flags were checked only once a plan fitted."""
    assert one_error_line(cli_in_process(*NOTHING_FITS, "--emit", tmp_path / "run", *flags)) == said
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("command", [["plan"], ["estimate", "--strategy", "ddp"]])
def test_a_sequence_past_learned_positions_says_the_length_to_pass(command):
    """It said what was wrong and stopped: "--seq-len 4096 exceeds gpt2's 1024 learned positions"."""
    line = one_error_line(cli_in_process(*command, "--model", "gpt2", "--gpu", "A100-80GB", "--seq-len", "4096"))
    assert line == "error: --seq-len 4096 exceeds gpt2's 1024 learned positions; pass --seq-len 1024 or less"


def test_an_estimate_of_a_layout_our_engine_refuses_says_so_before_estimating():
    """It estimated ZeRO-3 beside --pp for our engine, which refuses that layout at start-up
    (backends/engine/initialize.py); under another codebase's preset (FSDP x PP: torchtitan) it still estimates."""
    layout = ["--model", "gpt2", "--gpu", "A100-80GB", "--gpus-per-node", "4", "--strategy", "engine"]
    layout += ["--zero-stage", "3", "--pp", "2", "--grad-accum", "4"]
    line = one_error_line(cli_in_process("estimate", *layout))
    assert line.startswith("error: ZeRO-3 does not compose with pipeline parallelism on our engine; use --zero-stage 1")
    assert cli_in_process("estimate", *layout, "--implementation", "torchtitan").returncode == 0


@pytest.mark.parametrize(
    "flags, said",
    [
        (["--model", "mixtral-8x7b"], "and mixtral-8x7b has routed experts; use --ac selective or --ac full"),
        (["--model", "llama-3.1-8b", "--lora-rank", "16"], "--ac op with LoRA: the adapters' own matmuls"),
    ],
)
def test_op_level_checkpointing_where_it_is_not_counted_is_one_line(flags, said):
    """Op-level checkpointing is counted (and traced) for dense blocks without LoRA: elsewhere a guess would be
    printed as a number, so it is one line, exit 2 (docs/errors.md)."""
    line = one_error_line(cli_in_process("estimate", *flags, "--gpu", "H100-80GB", "--strategy", "fsdp", "--ac", "op"))
    assert line.startswith("error: ") and said in line


def test_a_data_folder_of_another_kind_says_what_to_do(tmp_path):
    """A folder of .csv files said only what was wrong: "--data DIR: no .txt, .jsonl, .json or .parquet file there"."""
    (tmp_path / "csv").mkdir()
    (tmp_path / "csv" / "rows.csv").write_text("text\nhello\n")
    line = one_error_line(cli_in_process(*EMIT, "--emit", tmp_path / "run", "--data", tmp_path / "csv"))
    assert line.endswith("file there; convert the text to one of them, or point at a folder that holds them")
    assert not (tmp_path / "run").exists()


def test_a_global_batch_micro_batches_cannot_fill_says_what_to_change():
    """It said "--global-batch 4 is not a multiple of --micro-batch 8" and no more."""
    line = one_error_line(cli_in_process("plan", "--model", "gpt2", "--gpu", "cpu", "--global-batch", "4",
                                         "--micro-batch", "8"))  # fmt: skip
    assert line == (
        "error: --global-batch 4 is not a multiple of --micro-batch 8; make it one, or pick a --micro-batch that "
        "divides 4"
    )


@pytest.mark.parametrize("force", [[], ["--force"]])
def test_emitting_into_the_model_folder_is_refused_and_leaves_it_as_it_was(tmp_path, force):
    """`--emit MODEL_DIR --force` turned the user's checkpoint folder into a run folder (its README.md moved to
    previous/, seven files written beside the weights); without --force it said only "pass --force"."""
    model = tmp_path / "ckpt"
    model.mkdir()
    (model / "config.json").write_text(
        '{"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 2, "n_positions": 64, "vocab_size": 128}'
    )
    (model / "README.md").write_text("my notes\n")
    before = sorted(path.name for path in model.iterdir())
    argv = ["plan", "--model", model, "--gpu", "cpu", "--gpus-per-node", "2", "--seq-len", "64", "--global-batch", "4"]
    line = one_error_line(cli_in_process(*argv, "--strategies", "ddp", "--emit", model, *force))
    assert line == (
        f"error: {model} holds a model (config.json), not a run folder; emit beside it, e.g. --emit runs/NAME, "
        "and keep the model folder as it is"
    )
    assert sorted(path.name for path in model.iterdir()) == before
    assert (model / "README.md").read_text() == "my notes\n"


def test_the_seed_interfaces_model_names_plan_at_every_door():
    """`plan -m llama-7b` said "unknown model 'llama-7b'; did you mean 'llama-2-7b'" where the seed interface,
    `--model-family text_generation --model-name llama-7b`, plans llama-2-7b (planner/models/legacy_names.py)."""
    from planner.models.resolve import resolve_model

    assert resolve_model("llama-7b") == resolve_model("llama-2-7b")
    assert cli_in_process("plan", "-m", "llama-7b", "--gpu", "A100-80GB", "--json").returncode == 0


def test_a_folder_named_config_json_is_said_as_a_folder(tmp_path):
    """It said "DIR/config.json: no config.json there", as if the user had named a model folder."""
    (tmp_path / "config.json").mkdir()
    line = one_error_line(cli_in_process("plan", "-m", tmp_path / "config.json", "--gpu", "A100-80GB"))
    assert (
        line
        == f"error: {tmp_path / 'config.json'} is a folder, not a config.json file; point at the model folder that holds one"
    )


@pytest.mark.parametrize(
    "argv, owners",
    [
        (["plan", "-m", "gpt2", "--resume-from", "x"], "; --resume-from is an option of `train`; "),
        (
            ["estimate", "-m", "gpt2", "--gpu", "A100-80GB", "--emit", "x"],
            "; --emit is an option of `plan` and `tune`; ",
        ),
        (["watch", "x", "--steps", "3"], "; --steps is an option of `plan`, `train` and `tune`; "),
    ],
)
def test_an_option_of_another_command_names_the_commands_that_take_it(argv, owners):
    """It said only "No such option: --resume-from; run 'hardware-selector plan --help'", whose help has none."""
    assert owners in one_error_line(cli_in_process(*argv))


def test_train_given_a_plan_option_names_the_commands_that_take_it(tmp_path):
    """`train DIR --gpu A100-80GB` (the folder's GPU is plan's to choose) named only the runner's help."""
    assert cli_in_process(*EMIT, "--strategies", "ddp", "--emit", tmp_path / "run").returncode == 0
    line = one_error_line(cli_in_process("train", tmp_path / "run", "--gpu", "A100-80GB"))
    assert line.endswith("; --gpu is an option of `db calibration`, `db list`, `estimate`, `plan` and `tune`")
    assert "--bogus is an option" not in one_error_line(cli_in_process("train", tmp_path / "run", "--bogus"))


@pytest.mark.parametrize("argv", [["-h"], ["plan", "-h"], ["train", "-h"], ["db", "list", "-h"], ["tune", "-h"]])
def test_dash_h_is_help_at_every_command(argv):
    """`hardware-selector -h` was exit 2, "No such option: -h; -h is an option of `train`" (the runner's argparse
    -h counted as an option `train` owns), and `train -h` said "argument --plan: expected one argument"."""
    completed = cli_in_process(*argv)
    assert completed.returncode == 0, completed.stderr
    assert f"Usage: hardware-selector {' '.join(argv[:-1])}".rstrip() in " ".join(completed.stdout.split())
    assert completed.stdout == cli_in_process(*argv[:-1], "--help").stdout
