"""Elastic re-planning: lose a node, keep training on what remains, grow back (docs/running.md, "Elastic").

The planner half: `plan --emit --elastic MIN:MAX` stores a fallback for every node count, each keeping the
plan's global batch, precision and strategy family, and bad ranges or strategies are one line. The runner half:
four run folders (our engine's ZeRO-1, ZeRO-3 -> ZeRO-2, FSDP, and the engine's tp2 -> dp) train 2 steps on 4
ranks, lose two ranks right after a checkpoint, train 2 more on 2 ranks, and finish on 4 again. The reference is
`from_pretrained` trained on one process over the same global batches (tests/runner_reference.py): each step's
loss within 1e-4 relative, the final weights within 1e-5, and every sample of the six global batches consumed
exactly once, counted by the rows' contents.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from planner.contract.run_config import DataConfig, Hyperparameters
from planner.elastic_plan import ElasticPlan, Fallback
from planner.errors import UserInputError
from planner.rundir.replan import plan_digest, plan_for_world, read_elastic
from planner.rundir.write import RunOptions, emit_run_folder
from tests.distributed import cli_in_process as cli
from tests.distributed import train_with_warm_ranks
from tests.emit_plans import make_plan

# --- the planner: the table, and bad input ------------------------------------------------------------------


def _plan(run_dir: Path, *extra: object):
    return cli(
        "plan", "-m", "gpt2", "--gpu", "cpu", "--gpus-per-node", "2", "--nodes", "2", "--seq-len", "64",
        "--global-batch", "8", "--emit", run_dir, *extra,
    )  # fmt: skip


def test_each_node_count_gets_a_plan_of_the_same_batch_precision_and_family(tmp_path):
    completed = _plan(tmp_path / "run", "--strategies", "engine", "--elastic", "1:2")
    assert completed.returncode == 0, completed.stderr
    document = json.loads((tmp_path / "run" / "plan.json").read_text())
    elastic = read_elastic(tmp_path / "run")
    assert (elastic.min_nodes, elastic.max_nodes, elastic.gpus_per_node) == (1, 2, 2)
    assert [entry.world_size for entry in elastic.fallbacks] == [2, 4]
    own = elastic.fallback_for(4)
    assert own.config.model_dump() == document["config"] and own.cluster.num_nodes == 2  # the plan itself
    from planner.plan import Plan

    plan = Plan.model_validate(document)
    for entry in elastic.fallbacks:
        fallback = entry.plan(plan)
        assert fallback.global_batch == 8 and fallback.cluster.world_size == entry.world_size
        assert fallback.config.strategy.value == "engine" and fallback.config.precision == plan.config.precision
    assert "elastic over 1:2 nodes" in completed.stdout and "2 node(s), 4 processes" in completed.stdout
    # Each count's step says its source, as the table's do (a record of that count replaces the formula's).
    assert [line.endswith(("s/step (formula)", "s/step (formula) (the plan)")) for line in completed.stdout.splitlines()
            if "node(s)," in line and "processes:" in line] == [True, True]  # fmt: skip


def test_a_one_node_plan_plans_its_extra_nodes_on_the_network_more_nodes_have(tmp_path):
    """`--nodes 1 --elastic 1:2` planned its 2-node fallback on the one node's cluster, whose network is "none":
    0 GB/s between the nodes, 2,550 s a step for Llama 3 8B on 2 x 8 H100s where `--nodes 2` plans 0.88 s (a new
    user's audit, 2026-11-30). The fallback is now the plan `--nodes 2` gives, on the GPU's typical link."""
    asked = ["plan", "-m", "llama-3-8b", "--gpu", "H100-80GB", "--gpus-per-node", "8", "--strategies", "fsdp"]
    asked += ["--global-batch", "64", "--seq-len", "2048"]
    assert cli(*asked, "--nodes", "1", "--emit", tmp_path / "one", "--elastic", "1:2").returncode == 0
    assert cli(*asked, "--nodes", "2", "--emit", tmp_path / "two").returncode == 0
    fallback = read_elastic(tmp_path / "one").fallback_for(16)
    two = json.loads((tmp_path / "two" / "plan.json").read_text())
    assert fallback.cluster is not None and fallback.throughput is not None and fallback.config is not None
    cluster = fallback.cluster.model_dump(mode="json")
    for key in ("inter_node_preset", "inter_node_bandwidth_GBps", "inter_node_latency_us", "gpu"):
        assert cluster[key] == two["cluster"][key], key
    assert fallback.config.model_dump(mode="json") == two["config"]
    assert fallback.throughput.step_time_s == pytest.approx(two["throughput"]["step_time_s"])


def test_a_node_count_where_nothing_fits_says_why_and_a_run_there_is_refused(tmp_path):
    run_dir = tmp_path / "big"
    completed = cli(
        "plan", "-m", "llama-3-70b", "--gpu", "H100-80GB", "--gpus-per-node", "8", "--nodes", "4",
        "--strategies", "fsdp", "--no-offload", "--emit", run_dir, "--elastic", "2:4",
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr
    assert "--elastic 2:4 narrowed to 4:4: 2 and 3 nodes fit no plan" in completed.stdout
    elastic = read_elastic(run_dir)
    assert (elastic.min_nodes, elastic.max_nodes) == (4, 4)
    assert "87.0 GiB per GPU > 72.0 GiB usable" in elastic.fallback_for(16).why_not
    assert "not a multiple of its data-parallel size 24" in elastic.fallback_for(24).why_not
    before = {path.name: path.read_bytes() for path in run_dir.iterdir()}
    refused = cli("train", run_dir, "--nproc", "16")
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines() == [
        "error: 16 processes cannot hold this run: FSDP full-shard: 87.0 GiB per GPU > 72.0 GiB usable, even at "
        "micro-batch 1, full AC on 16 GPUs [memory: formula, ZeRO paper + Korthikanti et al. (per-category sources "
        "in the plan)]; start 32 processes (the checkpoint is kept as it was)"
    ]
    outside = cli("train", run_dir, "--nproc", "8")
    assert outside.returncode == 2 and "world sizes that fit: 32" in outside.stderr
    assert {path.name: path.read_bytes() for path in run_dir.iterdir()} == before  # nothing written


def _big(run_dir: Path, nodes: int, elastic: str):
    return cli(
        "plan", "-m", "llama-3-70b", "--gpu", "A100-40GB", "--gpus-per-node", "8", "--nodes", nodes,
        "--global-batch", "64", "--seq-len", "4096", "--strategies", "fsdp", "--emit", run_dir, "--elastic", elastic,
    )  # fmt: skip


def test_a_min_where_nothing_fits_narrows_the_range_torchrun_is_given(tmp_path):
    # 1 node fits nothing: --nnodes 1:4 let torchrun start there, stop at once and spend its restarts (an audit).
    completed = _big(tmp_path / "run", 4, "1:4")
    assert completed.returncode == 0, completed.stderr
    assert "--elastic 1:4 narrowed to 2:4: 1 node fits no plan\n" in completed.stdout
    assert "NNODES_RANGE=${NNODES_RANGE:-2:4}" in (tmp_path / "run" / "launch.sh").read_text()
    sbatch = (tmp_path / "run" / "slurm.sbatch").read_text()
    assert "#SBATCH --nodes=2-4" in sbatch and "--nnodes=2:4" in sbatch
    elastic = read_elastic(tmp_path / "run")
    assert (elastic.min_nodes, elastic.max_nodes, elastic.requested_range) == (2, 4, (1, 4))
    assert "173.2 GiB per GPU > 36.0 GiB usable" in elastic.fallback_for(8).why_not  # the table still says why


def test_a_max_where_nothing_fits_is_one_line_and_writes_nothing(tmp_path):
    completed = _big(tmp_path / "run", 2, "1:3")
    assert completed.returncode == 2
    assert completed.stderr.strip().splitlines() == [
        "error: --elastic 1:3: 3 nodes fit no plan (FSDP full-shard: global batch 64 is not a multiple of its "
        "data-parallel size 24); the largest count that fits is 2 nodes: use --elastic 1:2"
    ]
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (("--elastic", "3:4"), "--elastic 3:4 does not hold the plan's own 2 node(s)"),
        (("--elastic", "2:1"), "the range needs 1 <= MIN < MAX nodes"),
        (("--elastic", "2"), "one node count is no elastic run"),  # was taken as 2:2 (a new user's audit)
        (("--elastic", "one:two"), "--elastic takes a node range MIN:MAX (e.g. 1:2), not 'one:two'"),
        (("--elastic", "1:2:3"), "--elastic takes a node range MIN:MAX (e.g. 1:2), not '1:2:3'"),
        (("--elastic", "1:40"), "spans 40 node counts; the run folder holds at most 16"),
        (("--strategies", "zero3", "--elastic", "1:2"), "a DeepSpeed checkpoint is not resharded"),
    ],
)
def test_bad_elastic_input_is_one_line_and_writes_nothing(tmp_path, extra, message):
    completed = _plan(tmp_path / "run", *extra)
    assert completed.returncode == 2
    assert message in completed.stderr and len(completed.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "run").exists()


def test_elastic_without_emit_is_one_line():
    completed = cli("plan", "-m", "gpt2", "--gpu", "cpu", "--elastic", "1:2")
    assert completed.returncode == 2 and "--elastic describes the run of an emitted folder" in completed.stderr


def test_the_history_leaves_the_plan_digest_alone(tmp_path):
    plan4 = make_plan(gpus_per_node=2, nodes=2, seq_len=64, micro_batch=2, grad_accum=1, strategy="fsdp")
    plan2 = make_plan(gpus_per_node=2, nodes=1, seq_len=64, micro_batch=2, grad_accum=2, strategy="fsdp")
    elastic = ElasticPlan(min_nodes=1, max_nodes=2, gpus_per_node=2, fallbacks=[Fallback.of(plan2), Fallback.of(plan4)])
    emit_run_folder(plan4, tmp_path / "run", elastic=elastic)
    from planner.rundir.plan_file import read_plan_file
    from planner.rundir.replan import append_history, replan_since

    plan, run = read_plan_file(tmp_path / "run")
    replanned, fitted = plan_for_world(plan, run, elastic, 2, 2)
    assert (fitted.world_size, fitted.grad_accum, fitted.global_batch) == (2, 2, run.global_batch)
    replan = replan_since(None, replanned, fitted, original=plan, original_run=run, at_step=0)
    assert replan.line() == (
        "re-planned: 4 → 2 ranks, FSDP full dp4 → FSDP full dp2, micro-batch x accumulation 2 x 1 → 2 x 2"
    )
    digest = plan_digest(tmp_path / "run")
    append_history(tmp_path / "run", replan)
    assert plan_digest(tmp_path / "run") == digest
    assert json.loads((tmp_path / "run" / "plan.json").read_text())["history"][0]["to_world"] == 2
    with pytest.raises(UserInputError, match="world sizes that fit: 2, 4"):
        plan_for_world(plan, run, elastic, 6, 2)


def test_a_refusal_counts_one_process_in_the_singular(tmp_path):
    # It read "1 processes: this run is elastic ..." and "start 1 processes" (an audit).
    plan1 = make_plan(gpus_per_node=1, nodes=1, seq_len=64, micro_batch=2, grad_accum=4, strategy="fsdp")
    too_few = Fallback(num_nodes=2, world_size=2, why_not="global batch 8 does not split")
    elastic = ElasticPlan(min_nodes=1, max_nodes=2, gpus_per_node=1, fallbacks=[Fallback.of(plan1), too_few])
    emit_run_folder(plan1, tmp_path / "run", elastic=elastic)
    from planner.rundir.plan_file import read_plan_file

    plan, run = read_plan_file(tmp_path / "run")
    with pytest.raises(UserInputError) as refused:
        plan_for_world(plan, run, elastic, 2, 1)
    assert str(refused.value) == (
        "2 processes cannot hold this run: global batch 8 does not split; start 1 process "
        "(the checkpoint is kept as it was)"
    )
    wider = ElasticPlan(min_nodes=1, max_nodes=2, gpus_per_node=2, fallbacks=[Fallback.of(plan1)])
    with pytest.raises(UserInputError, match=r"^3 processes: this run is elastic over 1 to 2 nodes"):
        plan_for_world(plan, run, wider, 3, 1)
    both = ElasticPlan(min_nodes=1, max_nodes=3, gpus_per_node=1, fallbacks=[
        Fallback.of(plan1), too_few, Fallback.of(plan1.model_copy(update={"cluster": plan1.cluster.model_copy(update={"num_nodes": 3})}))
    ])  # fmt: skip
    with pytest.raises(UserInputError, match=r"; start 1 or 3 processes \("):
        plan_for_world(plan, run, both, 2, 1)
    plan2 = make_plan(gpus_per_node=2, nodes=1, seq_len=64, micro_batch=2, grad_accum=2, strategy="fsdp")
    emit_run_folder(plan2, tmp_path / "two", elastic=ElasticPlan(
        min_nodes=1, max_nodes=2, gpus_per_node=2, fallbacks=[Fallback.of(plan2)]
    ))  # fmt: skip
    plan, run = read_plan_file(tmp_path / "two")
    with pytest.raises(UserInputError, match=r"^1 process: this run is elastic over 1 to 2 nodes of 2 "):
        plan_for_world(plan, run, read_elastic(tmp_path / "two"), 1, 1)
    emitted = cli(
        "plan", "-m", "gpt2", "--gpu", "cpu", "--gpus-per-node", "1", "--nodes", "2", "--seq-len", "32",
        "--global-batch", "8", "--strategies", "fsdp", "--emit", tmp_path / "one", "--elastic", "1:2",
    )  # fmt: skip
    assert emitted.returncode == 0, emitted.stderr
    assert "  1 node(s), 1 process: " in emitted.stdout and "  2 node(s), 2 processes: " in emitted.stdout


def test_a_re_plan_brings_its_own_settings_to_the_engine_file_and_keeps_the_users_edits(tmp_path):
    """A review: a re-plan to fewer ranks carried its ZeRO stage into engine.json but not the activation
    checkpointing it needs to fit there (nor its layout, which `train` then refused as an edited one). Every
    setting of the block the user left as the first plan had it is the re-plan's; one the user edited stays."""
    from backends.runner.elastic import fit_elastic
    from backends.runner.folder import engine_settings, load_run_folder
    from planner.rundir.run_overrides import RunOverrides

    common = {"seq_len": 64, "micro_batch": 2, "gpus_per_node": 2, "strategy": "engine", "zero_stage": 1}
    plan4 = make_plan(nodes=2, grad_accum=1, activation_checkpointing="none", **common)
    plan2 = make_plan(nodes=1, grad_accum=2, activation_checkpointing="full", **common)
    table = ElasticPlan(min_nodes=1, max_nodes=2, gpus_per_node=2, fallbacks=[Fallback.of(plan2), Fallback.of(plan4)])
    for name, edit in (("as-emitted", None), ("edited", "selective")):
        emit_run_folder(plan4, tmp_path / name, elastic=table)
        if edit:
            engine_json = tmp_path / name / "engine.json"
            document = json.loads(engine_json.read_text())
            document["hardware_selector"]["activation_checkpointing"] = edit
            engine_json.write_text(json.dumps(document))
        spec = load_run_folder(tmp_path / name, RunOverrides())
        fitted_spec, fitted, _ = fit_elastic(spec, spec.run, 2, 2)
        block = fitted_spec.engine_file.hardware_selector
        assert block.layout == fitted.layout and fitted.world_size == 2
        assert block.activation_checkpointing == (edit or "full")
        assert engine_settings(fitted_spec, fitted).hardware_selector.layout == fitted.layout  # not refused


# --- the runner: 4 ranks -> 2 -> 4 ---------------------------------------------------------------------------

STEPS = 6
# Global batch 8 of 64-token blocks: (on 4 ranks, on 2 ranks); micro-batch 2 throughout.
CASES = {
    "engine-zero1": ({"strategy": "engine", "zero_stage": 1, "grad_accum": 1}, {"strategy": "engine", "zero_stage": 1}),
    "engine-zero3": ({"strategy": "engine", "zero_stage": 3, "grad_accum": 1}, {"strategy": "engine", "zero_stage": 2}),
    "fsdp": ({"strategy": "fsdp", "grad_accum": 1}, {"strategy": "fsdp"}),
    "engine-tp-to-dp": (
        {"strategy": "engine", "zero_stage": 1, "tensor_parallel": 2},
        {"strategy": "engine", "zero_stage": 1},
    ),
}


@pytest.fixture(scope="module")
def elastic_runs(tmp_path_factory):
    from scripts.demo_checkpoint import make_local_gpt2
    from tests.distributed import run_torchrun

    root = tmp_path_factory.mktemp("elastic")
    model_dir, corpus = make_local_gpt2(root / "user")
    options = RunOptions(
        data=DataConfig(train=[str(corpus)]), optim=Hyperparameters(max_steps=STEPS, learning_rate=1e-3, warmup_steps=1)
    )
    for name, (on_four, on_two) in CASES.items():
        common = {"seq_len": 64, "micro_batch": 2, "gpus_per_node": 2}
        plan4 = make_plan(str(model_dir), nodes=2, **{**common, "grad_accum": 2, **on_four})
        plan2 = make_plan(str(model_dir), nodes=1, **{**common, "grad_accum": 2, **on_two})
        table = ElasticPlan(
            min_nodes=1, max_nodes=2, gpus_per_node=2, fallbacks=[Fallback.of(plan2), Fallback.of(plan4)]
        )
        emit_run_folder(plan4, root / name, options=options, elastic=table)
    folders = [str(root / name) for name in CASES]
    phases = {}
    for stop, nproc in ((2, 4), (4, 2), (STEPS, 4)):
        out = root / f"phase-{stop}.json"
        run_torchrun(["tests/engine_jobs/elastic_phases.py", str(out), str(stop), *folders], nproc=nproc, timeout=900)
        phases[stop] = json.loads(out.read_text())
    return root, phases


def _expected_samples(run_dir: Path) -> list[str]:
    from backends.data.stream import epoch_order
    from tests.runner_reference import runner_data

    run, data = runner_data(run_dir)
    order = epoch_order(len(data.train), 0, run.data.seed, shuffle=True)
    rows = [data.train[int(index)] for index in order[: STEPS * run.global_batch]]
    return [hashlib.sha1(row.numpy().tobytes()).hexdigest() for row in rows]


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CASES))
def test_a_run_that_loses_and_regains_ranks_trains_as_one_process_would(elastic_runs, name):
    import torch
    from safetensors.torch import load_file

    from tests.runner_reference import hf_reference_run

    root, phases = elastic_runs
    run_dir = root / name
    results = [phases[stop][name] for stop in (2, 4, STEPS)]
    assert [result["world"] for result in results] == [4, 2, 4]
    summary = results[-1]["summary"]
    assert (summary["steps"], summary["world_size"], summary["global_batch"]) == (STEPS, 4, 8)

    rows = results[-1]["rows"]
    replans = [row for row in rows if row["kind"] == "replan"]
    assert [(row["at_step"], row["from_world"], row["to_world"]) for row in replans] == [(2, 4, 2), (4, 2, 4)]
    assert [(row["from_micro_batch"], row["from_grad_accum"], row["to_grad_accum"]) for row in replans][0] == (
        2,
        1 if name != "engine-tp-to-dp" else 2,
        2,
    )
    history = json.loads((run_dir / "plan.json").read_text())["history"]
    assert [(entry["from_world"], entry["to_world"]) for entry in history] == [(4, 2), (2, 4)]

    # Every sample of the six global batches once: none seen twice, none skipped, by content.
    assert all(result["replicas_agree"] for result in results)
    consumed = [digest for result in results for digest in result["samples"]]
    assert sorted(consumed) == sorted(_expected_samples(run_dir))

    # The loss curve continues the single-process reference's, and the weights end where it ends.
    reference_losses, reference_weights = hf_reference_run(run_dir, STEPS)
    losses = [row["loss"] for row in rows if row["kind"] == "train"]
    assert [row["step"] for row in rows if row["kind"] == "train"] == list(range(1, STEPS + 1))
    assert losses == pytest.approx(reference_losses, rel=1e-4)
    final = load_file(str(run_dir / "final" / "model.safetensors"))
    assert final, "final/ holds the weights"
    for key, value in final.items():
        torch.testing.assert_close(
            value, reference_weights[key], atol=1e-5, rtol=0, msg=lambda m, key=key: f"{key}: {m}"
        )


def running_md_elastic_commands() -> list[list[str]]:
    """docs/running.md's elastic example, command by command, as printed (without the program's name)."""
    import shlex

    from tests.project_sources import REPO

    text = (REPO / "docs" / "running.md").read_text(encoding="utf-8")
    block = text[text.index("<!-- elastic-example") :]
    block = block[block.index("```bash\n") + len("```bash\n") : block.index("```\n", block.index("```bash"))]
    commands = block.replace("\\\n", " ").strip().split("\n")
    return [shlex.split(command, comments=True)[1:] for command in commands]


@pytest.mark.slow
def test_the_running_md_example_loses_a_node_and_re_plans(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    commands = running_md_elastic_commands()
    assert [command[0] for command in commands] == ["plan", "train", "train"]
    outputs = []
    for command in commands:
        # Each `train` makes every check it makes, then the very torchrun command it prints runs with its ranks
        # forked warm (train_with_warm_ranks): the re-plan is the runner's, not the launch's.
        completed = cli(*command) if command[0] == "plan" else train_with_warm_ranks(*command[1:])
        assert completed.returncode == 0, completed.stderr[-3000:]
        outputs.append(completed.stdout)
    run_dir = tmp_path / "runs" / "elastic"
    assert "elastic over 1:2 nodes" in outputs[0]
    replanned = next(line for line in outputs[2].splitlines() if line.startswith("re-planned: "))
    assert (
        replanned.startswith("re-planned: 4 → 2 ranks, FSDP ") and "predicted" in replanned and "(formula)" in replanned
    )
    assert " dp4 → FSDP " in replanned and replanned.split(" → FSDP ")[1].split(",")[0].endswith("dp2")
    assert "resuming from" in outputs[2]
    history = json.loads((run_dir / "plan.json").read_text())["history"]
    assert [(entry["at_step"], entry["from_world"], entry["to_world"]) for entry in history] == [(2, 4, 2)]
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows if row["kind"] == "train"] == [1, 2, 3, 4]
    assert [row["to_world"] for row in rows if row["kind"] == "replan"] == [2]


@pytest.mark.parametrize(
    ("table", "low", "line"),
    [
        ((1, 2, 3), 2, "--elastic 1:3 narrowed to 2:3: 1 node fits no plan"),
        ((2, 3, 4), 3, "--elastic 2:4 narrowed to 3:4: 2 nodes fit no plan"),  # was "2 nodes fits"
        ((1, 2, 3, 4), 3, "--elastic 1:4 narrowed to 3:4: 1 and 2 nodes fit no plan"),
        ((1, 2, 3, 4), 4, "--elastic 1:4 narrowed to 4:4: 1-3 nodes fit no plan (torchrun restarts on 4 nodes only)"),
    ],
)
def test_the_narrowing_line_agrees_in_number(table, low, line):
    from types import SimpleNamespace

    entries = [SimpleNamespace(num_nodes=count) for count in table]
    elastic = ElasticPlan.model_construct(min_nodes=low, max_nodes=table[-1], gpus_per_node=8, fallbacks=entries)
    assert elastic.narrowing() == line
