"""Training a rotary model past its trained positions is planned with a note, never silently (docs/errors.md,
"Numbers"): in plan's reasons (table and --json), the Python API's reasons and estimate's output. The reference
is the model's own max_position_embeddings (llama-2-7b: 4,096), and the ratio computed by hand; at the limit
itself there is no note, and learned positions stay refused."""

from __future__ import annotations

import json

from hardware_selector_cli.app import main

NOTE = "seq 9,999 is 2.4x llama-2-7b's 4,096 trained positions"  # 9999 / 4096 = 2.44
PLAN = ["plan", "--model", "llama-2-7b", "--gpu", "A100-80GB", "--strategies", "fsdp"]


def _plan_reasons(capsys, seq_len: int) -> list[str]:
    assert main([*PLAN, "--seq-len", str(seq_len), "--json"]) == 0
    return json.loads(capsys.readouterr().out)["best"]["reasons"]


def test_plan_notes_a_sequence_past_the_trained_positions(capsys) -> None:
    assert any(NOTE in reason and "rope_scaling" in reason for reason in _plan_reasons(capsys, 9999))
    assert not any("trained positions" in reason for reason in _plan_reasons(capsys, 4096))
    assert main([*PLAN, "--seq-len", "9999"]) == 0
    assert NOTE in " ".join(capsys.readouterr().out.split())  # the table's reasons, unwrapped


def test_the_python_api_and_estimate_say_it_too(capsys) -> None:
    from hardware_selector import get_distributed_training_config

    answer = get_distributed_training_config("causal_lm", "llama-2-7b", 8, seq_len=9999, gpu="A100-80GB")
    assert answer["fits"] and any(NOTE in reason for reason in answer["reasons"])
    estimate = ["estimate", "--model", "llama-2-7b", "--gpu", "A100-80GB", "--strategy", "zero3", "--seq-len", "9999"]
    assert main([*estimate, "--json"]) == 0
    assert NOTE in json.loads(capsys.readouterr().out)["notes"][0]
    assert main(estimate) == 0
    assert f"note: {NOTE}" in capsys.readouterr().out


def test_learned_positions_stay_refused(capsys) -> None:
    assert main(["plan", "--model", "gpt2", "--gpu", "A100-80GB", "--seq-len", "4096"]) == 2
    assert capsys.readouterr().err == (
        "error: --seq-len 4096 exceeds gpt2's 1024 learned positions; pass --seq-len 1024 or less\n"
    )
