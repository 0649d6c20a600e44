"""`hardware-selector estimate`: every strategy and option of issue 3, in JSON and as a table,
checked against the model-state formulas (ZeRO paper Sec. 5 bytes per parameter) and the
orderings the mechanisms imply; bad combinations give one line and exit code 2."""

from __future__ import annotations

import json

import pytest

from hardware_selector_cli.app import main
from planner.models.resolve import resolve_model

GIB = 2**30
BASE = ["estimate", "--model", "llama-2-7b", "--gpu", "A100-80GB", "--gpus-per-node", "8", "--seq-len", "2048"]
REQUIRED = ("parameters", "gradients", "optimizer_states", "activations", "buffers", "overhead", "total")


def run_json(capsys, *extra: str, base: list[str] = BASE) -> dict:
    code = main([*base, *extra, "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return json.loads(captured.out)


def check_invariants(document: dict) -> dict[str, int]:
    memory = document["memory"]
    per_gpu = memory["per_gpu_bytes"]
    assert set(REQUIRED) <= set(per_gpu)
    assert all(value >= 0 for value in per_gpu.values())
    assert per_gpu["total"] == sum(value for key, value in per_gpu.items() if key != "total")
    usable = int(memory["gpu_capacity_bytes"] * (1 - memory["headroom_fraction"]))
    assert memory["fits"] == (
        per_gpu["total"] <= usable
        and (
            memory["cpu_capacity_per_node_bytes"] is None
            or memory["cpu_per_node_bytes"] <= memory["cpu_capacity_per_node_bytes"]
        )
        and (
            memory["nvme_capacity_per_node_bytes"] is None
            or memory["nvme_per_node_bytes"] <= memory["nvme_capacity_per_node_bytes"]
        )
    )
    assert memory["margin_bytes"] == usable - per_gpu["total"]
    assert document["model"]["name"] and document["model"]["params"] > 0
    assert memory["sources"]["total"].startswith("sum")
    return per_gpu


PSI = resolve_model("llama-2-7b").params.total
N = 8

# (extra flags, {category: expected bytes per GPU}) from the layouts in planner/memory/model_states.py:
# PyTorch-native mixed precision keeps fp32 weights (4) and AdamW states (8); DeepSpeed keeps 16-bit
# weights (2) and master + states (12) in the optimizer's shards. At an optimizer-step peak,
# torch's foreach AdamW adds one fp32 state-sized temporary (4 bytes per parameter shard);
# DeepSpeed's fused Adam does not.
MODEL_STATE_CASES = {
    "ddp": (["--strategy", "ddp"], {"parameters": 4 * PSI, "optimizer_states": 8 * PSI}),
    "fsdp-full": (["--strategy", "fsdp"], {"parameters": 4 * PSI / N, "optimizer_states": 8 * PSI / N}),
    "fsdp-grad-op": (["--strategy", "fsdp", "--fsdp-sharding", "grad-op"], {"parameters": 4 * PSI / N}),
    "fsdp-none": (
        ["--strategy", "fsdp", "--fsdp-sharding", "none"],
        {"parameters": 4 * PSI, "optimizer_states": 8 * PSI},
    ),
    "fsdp-offload": (["--strategy", "fsdp", "--offload-params", "cpu"], {"parameters": 0, "optimizer_states": 0}),
    "zero0": (["--strategy", "zero0"], {"parameters": 2 * PSI, "optimizer_states": 12 * PSI}),
    "zero1": (["--strategy", "zero1"], {"parameters": 2 * PSI, "optimizer_states": 12 * PSI / N}),
    "zero2": (["--strategy", "zero2"], {"parameters": 2 * PSI, "optimizer_states": 12 * PSI / N}),
    "zero3": (["--strategy", "zero3"], {"parameters": 2 * PSI / N, "optimizer_states": 12 * PSI / N}),
    "zero2-offload-cpu": (
        ["--strategy", "zero2", "--offload-optimizer", "cpu"],
        {"parameters": 2 * PSI, "optimizer_states": 0},
    ),
    "zero3-offload-nvme": (
        ["--strategy", "zero3", "--offload-optimizer", "nvme", "--offload-params", "nvme"],
        {"parameters": 0, "optimizer_states": 0},
    ),
}


@pytest.mark.parametrize("case", list(MODEL_STATE_CASES))
def test_model_states_follow_the_layout_formulas(capsys, case):
    flags, expected = MODEL_STATE_CASES[case]
    document = run_json(capsys, *flags, "--ac", "full")
    per_gpu = check_invariants(document)
    native = flags[1] in ("ddp", "fsdp") and expected.get("optimizer_states")
    if native and document["memory"]["peak_phase"] == "optimizer-step":
        expected = {**expected, "optimizer_states": expected["optimizer_states"] * 12 / 8}
    for category, value in expected.items():
        assert per_gpu[category] == pytest.approx(value, rel=0.01, abs=1), category


def test_offload_reports_cpu_and_nvme_per_node(capsys):
    cpu = run_json(capsys, "--strategy", "zero3", "--offload-optimizer", "cpu", "--offload-params", "cpu")["memory"]
    # Per node: every rank's shard of 16-bit weights and gradients, fp32 master, states and gradients.
    assert cpu["cpu_per_node_bytes"] == pytest.approx((2 + 2 + 4 + 12) * PSI, rel=0.01)
    nvme = run_json(capsys, "--strategy", "zero3", "--offload-optimizer", "nvme", "--offload-params", "nvme")["memory"]
    assert nvme["nvme_per_node_bytes"] == pytest.approx((2 + 2 + 4 + 12) * PSI, rel=0.01)
    fsdp = run_json(capsys, "--strategy", "fsdp", "--offload-params", "cpu")["memory"]
    assert fsdp["cpu_per_node_bytes"] == pytest.approx((4 + 4 + 8) * PSI, rel=0.01)


@pytest.mark.parametrize("strategy", ["ddp", "zero0"])
def test_optimizer_offload_without_a_sharded_optimizer_is_one_line(capsys, strategy):
    """DDP and ZeRO-0 keep a whole optimizer on every GPU: --offload-optimizer was dropped without a word."""
    assert (
        main(["estimate", "-m", "llama-2-7b", "-g", "A100-80GB", "--strategy", strategy, "--offload-optimizer", "cpu"])
        == 2
    )
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: optimizer offload needs ZeRO stage 1 or higher or FSDP") and "\n" not in err


def test_hybrid_shard_shards_within_a_node_only(capsys):
    two_nodes = ["--strategy", "fsdp", "--fsdp-sharding", "hybrid", "--nodes", "2"]
    per_gpu = check_invariants(run_json(capsys, *two_nodes))
    assert per_gpu["parameters"] == pytest.approx(4 * PSI / N, rel=0.01)


def test_engine_layouts(capsys):
    tp_pp = check_invariants(run_json(capsys, "--strategy", "engine", "--tp", "2", "--pp", "2", "--grad-accum", "8"))
    with_sp = check_invariants(
        run_json(capsys, "--strategy", "engine", "--tp", "2", "--pp", "2", "--grad-accum", "8", "--sp")
    )
    interleaved = check_invariants(
        run_json(
            capsys,
            "--strategy",
            "engine",
            "--tp",
            "2",
            "--pp",
            "2",
            "--grad-accum",
            "8",
            "--pp-schedule",
            "interleaved-1f1b",
            "--virtual-stages",
            "2",
        )
    )
    gpipe = check_invariants(
        run_json(
            capsys, "--strategy", "engine", "--tp", "2", "--pp", "2", "--grad-accum", "8", "--pp-schedule", "gpipe"
        )
    )
    # Korthikanti: SP splits the hidden-width activations; interleaving adds (p-1)/(p*v) of the
    # first stage's activations; GPipe keeps all 8 micro-batches in flight instead of p = 2, and
    # then the last stage (the same blocks, plus the head's input and 8 log-softmax outputs) is
    # the most loaded: 4x the 1F1B first stage plus the head's share.
    assert with_sp["activations"] < tp_pp["activations"]
    assert interleaved["activations"] == pytest.approx(tp_pp["activations"] * (1 + 1 / 4), rel=1e-6)
    assert tp_pp["temporaries"] == 0  # 1F1B: the first stage holds no loss
    assert gpipe["temporaries"] > 0
    assert 4 * tp_pp["activations"] < gpipe["activations"] < 4.2 * tp_pp["activations"]
    # TP x PP = 4 splits the ZeRO-1 engine's 16-bit weights four ways (embedding aside).
    assert tp_pp["parameters"] < 2 * PSI / 4 * 1.1


def test_checkpointing_precision_optimizer_and_attention_orderings(capsys):
    def total(*flags: str, key: str = "total") -> int:
        return check_invariants(run_json(capsys, "--strategy", "fsdp", *flags))[key]

    assert (
        total("--ac", "full", key="activations")
        < total("--ac", "selective", key="activations")
        < total(key="activations")
    )
    assert total("--attention", "eager", key="activations") > total(key="activations")
    assert total("--precision", "fp32", key="activations") > total(key="activations")
    assert total("--precision", "bf16", key="parameters") == pytest.approx(total(key="parameters") / 2, rel=0.01)
    assert total("--precision", "fp16-mixed") == total()
    # Peak at backward start (activations dominate): the optimizer's persistent states only.
    adamw = total(key="optimizer_states")
    assert total("--optimizer", "sgd", key="optimizer_states") == pytest.approx(adamw / 2, rel=0.01)
    assert total("--optimizer", "lion", key="optimizer_states") == pytest.approx(adamw / 2, rel=0.01)
    assert total("--optimizer", "adamw-8bit", key="optimizer_states") < adamw / 3
    assert total("--optimizer", "adafactor", key="optimizer_states") < adamw / 100


def test_lora_and_qlora_freeze_the_base(capsys):
    full = check_invariants(run_json(capsys, "--strategy", "ddp", "--ac", "full"))
    lora = check_invariants(run_json(capsys, "--strategy", "ddp", "--ac", "full", "--lora-rank", "16"))
    qlora = check_invariants(run_json(capsys, "--strategy", "ddp", "--ac", "full", "--lora-rank", "16", "--qlora"))
    assert lora["optimizer_states"] < full["optimizer_states"] / 50
    assert qlora["parameters"] < lora["parameters"] / 3  # 4.127-bit blocks instead of 16-bit weights


@pytest.mark.parametrize(
    "model, extra",
    [
        ("llama-3-8b", []),  # GQA
        ("mixtral-8x7b", ["--strategy", "engine", "--ep", "2"]),  # MoE, expert parallel (our engine's)
        ("t5-base", ["--attention", "eager"]),  # encoder-decoder
        ("bert-base-uncased", ["--seq-len", "512"]),  # encoder-only
        ("gpt2", ["--seq-len", "1024"]),
    ],
)
def test_architectures(capsys, model, extra):
    base = ["estimate", "--model", model, "--gpu", "H100-80GB", "--gpus-per-node", "8"]
    document = run_json(capsys, "--strategy", "fsdp", *extra, base=base)
    check_invariants(document)
    # At their own peak (end of forward): the engine's EP run peaks later, at its optimizer step.
    assert document["memory"]["activations_peak_bytes"] > 0


def test_table_output_says_fit_and_margin(capsys):
    assert main([*BASE, "--strategy", "zero3", "--overhead-gb", "2"]) == 0
    out = capsys.readouterr().out
    assert "fits" in out and "under the usable GPU memory" in out and "2.00 GiB" in out
    assert main([*BASE, "--strategy", "ddp"]) == 0
    assert "over the usable GPU memory" in capsys.readouterr().out


def test_table_output_has_the_speed_and_its_source(capsys):
    """README: estimate prints step time, tokens/s, MFU and HFU per GPU; the table showed memory only."""
    speed = run_json(capsys, "--strategy", "zero3")["throughput"]
    assert main([*BASE, "--strategy", "zero3"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"step {speed['step_time_s']:.3g} s" in out and f"{speed['tokens_per_s']:,.0f} tokens/s" in out
    assert f"MFU {speed['mfu']:.0%}" in out and f"HFU {speed['hfu']:.0%}" in out
    assert "[throughput: formula" in out
    # A precision the GPU lacks is refused before any table, as plan refuses it (tests/test_estimate_precision.py).
    assert main([*BASE, "--gpu", "V100-32GB", "--precision", "bf16-mixed", "--strategy", "zero3"]) == 2
    assert capsys.readouterr().err == "error: V100-32GB has no bf16 support; use fp16-mixed\n"


def test_offload_that_overflows_cpu_ram_does_not_fit(capsys):
    flags = ["--strategy", "zero3", "--offload-optimizer", "cpu", "--offload-params", "cpu", "--cpu-ram-gb", "100"]
    memory = run_json(capsys, *flags)["memory"]
    assert memory["margin_bytes"] > 0 and not memory["fits"]  # the GPU side fits, the node's RAM does not
    assert main([*BASE, *flags]) == 0
    assert "more CPU memory per node" in capsys.readouterr().out


def test_overhead_override(capsys):
    per_gpu = check_invariants(run_json(capsys, "--strategy", "zero3", "--overhead-gb", "1.5"))
    assert per_gpu["overhead"] == int(1.5 * GIB)


@pytest.mark.parametrize(
    "flags, fragment",
    [
        (["--strategy", "engine", "--tp", "3", "--gpus-per-node", "6"], "32 attention heads"),
        (
            [
                "--strategy",
                "engine",
                "--pp",
                "5",
                "--gpus-per-node",
                "5",
                "--grad-accum",
                "5",
                "--pp-layers",
                "6,6,6,6,6",
            ],
            "sums to 30, but llama-2-7b has 32 layers",
        ),  # fmt: skip
        (
            ["--strategy", "engine", "--pp", "2", "--gpus-per-node", "2", "--grad-accum", "2", "--pp-layers", "16,x"],
            "--pp-layers lists layers per pipeline chunk as whole numbers",
        ),  # fmt: skip
        (["--strategy", "zero3", "--lora-rank", "8", "--qlora"], "QLoRA with ZeRO-3"),
        (["--gpu", "no-such-gpu"], "no-such-gpu"),
        (["--model", "no-such-model"], "unknown model"),
        (["--overhead-gb", "-1"], "--overhead-gb"),
    ],
)
def test_bad_combinations_one_line_exit_2(capsys, flags, fragment):
    assert main([*BASE, *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error:")
    assert fragment in err


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--strategy", "zero3", "--zero-stage", "1"], "--zero-stage 1 conflicts with --strategy zero3 (stage 3)"),
        (["--strategy", "fsdp", "--zero-stage", "2"], "--zero-stage 2 conflicts with --strategy fsdp (no ZeRO stage)"),
        (["--strategy", "ddp", "--lora-rank", "5000"], "--lora-rank 5000 is larger than gpt2's hidden size 768"),
        (["--strategy", "ddp", "--ep", "2"], "for one with experts add --strategy engine"),
        (["--strategy", "zero3", "--ep", "2"], "every expert on every rank under deepspeed)"),
        (["--strategy", "ddp", "--offload-optimizer", "cpu"], "optimizer offload needs ZeRO stage 1 or higher or FSDP"),
        (["--strategy", "fsdp", "--offload-optimizer", "cpu"], "FSDP offloads the optimizer with the parameters"),
        (["--strategy", "zero2", "--offload-optimizer", "nvme"], "NVMe offload runs on DeepSpeed's ZeRO-3 only"),
        (["--strategy", "engine", "--zero-stage", "1", "--offload-optimizer", "nvme"], "use --strategy zero3"),
        (["--strategy", "ddp", "--implementation", "megatron"], "trains with --strategy engine, not DDP"),
        (["--strategy", "engine", "--implementation", "llm-foundry"], "trains with --strategy fsdp, not engine"),
        (
            ["--strategy", "engine", "--pp", "2", "--grad-accum", "4", "--pp-schedule", "interleaved-1f1b"],
            "add --virtual-stages 2",
        ),  # was estimated as plain 1F1B (a new user's audit)
        (
            ["--strategy", "ddp", "--fsdp-sharding", "grad-op"],
            "--fsdp-sharding grad-op shards FSDP, not --strategy ddp",
        ),
        (["--strategy", "zero2", "--fsdp-sharding", "full"], "use --strategy fsdp, or drop --fsdp-sharding"),
        (
            ["--strategy", "engine", "--pp-schedule", "gpipe"],
            "--pp-schedule gpipe shapes pipeline stages; it needs --pp",
        ),
        # said in the layout's field names once ("layout: virtual_stages > 1 needs pipeline parallelism (pp > 1)")
        (["--strategy", "engine", "--virtual-stages", "2"], "--virtual-stages 2 shapes pipeline stages; it needs --pp"),
        (["--strategy", "engine", "--pp-layers", "6,6"], "--pp-layers 6,6 shapes pipeline stages; it needs --pp"),
    ],
)
def test_a_flag_that_cannot_apply_is_an_error_not_a_no_op(flags, message):
    from tests.distributed import cli_in_process

    model = "mixtral-8x7b" if "--ep" in flags else "gpt2"  # a model with experts: the strategy is what refuses --ep
    completed = cli_in_process("estimate", "-m", model, "--gpu", "H100-80GB", *flags)
    assert completed.returncode == 2 and message in completed.stderr and len(completed.stderr.splitlines()) == 1


def test_engine_tp_on_a_family_the_engine_pipelines_only_is_refused_for_our_implementation():
    from tests.distributed import cli_in_process

    args = ["estimate", "-m", "deepseek-v3", "--gpu", "H100-80GB", "--nodes", "8", "--strategy", "engine", "--tp", "2"]
    refused = cli_in_process(*args)
    assert refused.returncode == 2 and "our engine does not split deepseek_v3 models over tp" in refused.stderr
    assert cli_in_process(*args, "--implementation", "megatron").returncode == 0  # Megatron-LM's split is estimated


def test_estimate_keeps_the_headroom_plan_keeps_and_says_how_much(capsys):
    """`plan` and `estimate` of the same configuration agree on the usable memory (the reference: plan's own
    JSON for it), and the estimate's verdict line names the headroom and its flag."""
    config = ["--strategy", "zero3", "--micro-batch", "1", "--seq-len", "2048", "--ac", "full"]
    plan = ["plan", "--model", "llama-2-7b", "--gpu", "A100-80GB", "--gpus-per-node", "8", "--global-batch", "8",
            "--strategies", "zero3", "--micro-batch", "1", "--seq-len", "2048", "--json"]  # fmt: skip
    assert main(plan) == 0
    planned = json.loads(capsys.readouterr().out)["best"]["memory"]
    estimated = run_json(capsys, *config)["memory"]
    assert estimated["headroom_fraction"] == planned["headroom_fraction"] == 0.1
    assert estimated["margin_bytes"] == int(0.9 * estimated["gpu_capacity_bytes"]) - estimated["per_gpu_bytes"]["total"]
    assert main([*BASE, *config]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "under the usable GPU memory, 72.00 GiB (80.00 GiB less 10% headroom, --headroom)" in out


def test_the_offload_line_says_where_the_host_ram_comes_from(capsys):
    """The CPU memory an offload needs is set against the node's host RAM; that figure (the reference: the JSON's
    cpu_capacity_per_node_bytes, 1 TiB) is an assumption unless --cpu-ram-gb gives it, and the line says so."""
    config = ["--strategy", "zero3", "--offload-optimizer", "cpu"]
    assert run_json(capsys, *config)["memory"]["cpu_capacity_per_node_bytes"] == 1 << 40
    assert main([*BASE, *config]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "of 1.00 TiB (host RAM: 1024 GiB per node, assumed: 128 GiB per SXM GPU, half of the 2 TB" in out
    assert main([*BASE, *config, "--cpu-ram-gb", "512"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "of 512.00 GiB" in out and "assumed" not in out


@pytest.mark.parametrize(
    ("flags", "followed"),
    [
        # Found by an audit: "make --seq-len a multiple of 6", followed (4098), met "--cp 3 = 3 does not divide the
        # 8 GPUs", which held all along: the GPU count is said first, its fix (--cp 2) then the sequence's.
        (
            ["--strategy", "engine", "--cp", "3"],
            ["--strategy", "engine", "--cp", "2", "--seq-len", "4096"],
        ),
        # A dense model's --ep under zero3 pointed to --strategy engine, which then said "has no experts".
        (["--strategy", "zero3", "--ep", "2"], ["--strategy", "zero3"]),
    ],
)
def test_following_the_first_refusal_leads_to_no_refusal_that_held_before(flags, followed):
    """The reference: the flags the first message's advice leads to give an estimate (exit 0)."""
    from tests.distributed import cli_in_process

    base = ["estimate", "--model", "llama-2-7b", "--gpu", "A100-80GB", "--gpus-per-node", "8"]
    first = cli_in_process(*base, *flags)
    assert first.returncode == 2 and len(first.stderr.strip().splitlines()) == 1, first.stderr
    said = first.stderr
    if "--cp" in flags:
        assert "--cp 3 = 3 does not divide the 8 GPUs" in said  # not "make --seq-len a multiple of 6"
    else:
        assert "--ep 2: llama-2-7b has no experts; drop --ep" in said  # not "add --strategy engine"
    assert cli_in_process(*base, *followed).returncode == 0
