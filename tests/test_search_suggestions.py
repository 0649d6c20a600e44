"""Every "what would fit" suggestion, planned as printed, fits (planner/search/suggest.py).

The reference is the search itself: each cluster a no-fit answer names is
rebuilt from the printed flags (`--gpu G --gpus-per-node N --nodes M`) and
searched again with the same request; it must find a plan. Checked over
random requests (hypothesis), which is how "at 8 GPUs these fit: L40", then
"8 x L40 does not fit" was found.
"""

from __future__ import annotations

import json
import re

from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from planner.hardware.cluster import GIB, default_cpu_ram_per_node, make_cluster
from planner.hardware.gpus import resolve_gpu
from planner.models.resolve import resolve_model
from planner.search import PlanRequest, search_plans
from planner.search.suggest import stated_host_ram_gib

FEWEST = re.compile(r"^(\d+) x (\S+) \(--gpus-per-node (\d+) --nodes (\d+)\) is the fewest that fits")
CATALOG = re.compile(r"^at (\d+) GPUs \(--gpus-per-node (\d+) --nodes (\d+)\) these catalog GPUs fit: (.+)$")
# The selector's (the seed CLI's) spelling: a count, built as cluster_for builds it (planner/selector/gpu_choice.py).
SEED_FEWEST = re.compile(r"^(\d+) x (\S+) \(--distributed --gpu-count (\d+)\) is the fewest that fits")
SEED_CATALOG = re.compile(r"^at (\d+) GPUs \(--distributed --gpu-count (\d+)\) these catalog GPUs fit: (.+)$")
TOTAL = re.compile(r"^--global-batch (\d+) on (\d+) x (\S+) \(--gpus-per-node (\d+) --nodes (\d+)\) fits")

MODELS = ["opt-6.7b", "llama-2-13b", "opt-30b", "llama-2-70b", "mixtral-8x7b", "gpt2-xl", "t5-3b"]
SMALL_GPUS = ["T4", "L4", "A10", "V100-16GB", "V100-32GB", "A100-40GB", "RTX-4090"]
STRATEGY_SETS = [
    ("ddp", "fsdp", "deepspeed", "engine"),
    ("ddp", "fsdp", "deepspeed"),
    ("ddp",),
]


def _seed_cluster(gpu: str, count: str) -> tuple[str, int, int]:
    from planner.selector.gpu_choice import cluster_for

    cluster = cluster_for(resolve_gpu(gpu), int(count))
    return gpu, cluster.gpus_per_node, cluster.num_nodes


def suggested_clusters(lines: list[str]) -> list[tuple[str, int, int]]:
    """(gpu, gpus_per_node, nodes) for every cluster a suggestion names at the batch as stated."""
    named = []
    for line in lines:
        if match := SEED_FEWEST.match(line):
            count, gpu, asked = match.groups()
            assert count == asked, line
            named.append(_seed_cluster(gpu, count))
        elif match := SEED_CATALOG.match(line):
            _, count, gpus = match.groups()
            named += [_seed_cluster(gpu.strip(), count) for gpu in gpus.split(",")]
        elif match := FEWEST.match(line):
            count, gpu, per_node, nodes = match.groups()
            assert int(count) == int(per_node) * int(nodes), line
            named.append((gpu, int(per_node), int(nodes)))
        elif match := CATALOG.match(line):
            _, per_node, nodes, gpus = match.groups()
            named += [(gpu.strip(), int(per_node), int(nodes)) for gpu in gpus.split(",")]
    return named


def suggested_totals(lines: list[str]) -> list[tuple[int, str, int, int]]:
    """(global batch, gpu, gpus_per_node, nodes) for every suggestion that changes the total to one that fits."""
    named = []
    for line in lines:
        if match := TOTAL.match(line):
            total, count, gpu, per_node, nodes = match.groups()
            assert int(count) == int(per_node) * int(nodes) and int(total) % int(count) == 0, line
            named.append((int(total), gpu, int(per_node), int(nodes)))
    return named


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(
    model=st.sampled_from(MODELS),
    gpu=st.sampled_from(SMALL_GPUS),
    gpus_per_node=st.sampled_from([1, 2, 4, 8]),
    nodes=st.sampled_from([1, 2]),
    seq_len=st.sampled_from([512, 1024, 2048]),
    strategies=st.sampled_from(STRATEGY_SETS),
    offload=st.booleans(),
    batch=st.sampled_from([None, ("per-gpu", 1), ("total", 1), ("total", 2), ("scaled", 1), ("scaled", 4)]),
)
def test_every_suggested_cluster_fits_when_planned_as_printed(
    model, gpu, gpus_per_node, nodes, seq_len, strategies, offload, batch
):
    """Batches as both doors state them: per GPU (--micro-batch; the selector's batch_size), or a total
    (--global-batch), including totals smaller than the GPU count."""
    spec = resolve_model(model)
    seq_len = min(seq_len, spec.max_position_embeddings)
    cluster = make_cluster(gpu, gpus_per_node=gpus_per_node, nodes=nodes)
    world = cluster.world_size
    kind, size = batch or (None, None)
    stated = {
        "per-gpu": {"micro_batch": size},
        "total": {"global_batch": size},
        "scaled": {"global_batch": (size or 1) * world},
    }.get(kind or "", {})
    request = PlanRequest(seq_len=seq_len, strategies=strategies, allow_offload=offload, **stated)
    result = search_plans(spec, cluster, request)
    assume(result.best is None)
    named = suggested_clusters(result.suggestions)
    event(f"{len(named)} clusters suggested")
    for gpu_name, per_node, node_count in named:
        other = make_cluster(gpu_name, gpus_per_node=per_node, nodes=node_count)
        replanned = search_plans(spec, other, request.model_copy(update={"top_k": 1}), suggest=False)
        assert replanned.best is not None, f"suggested {node_count} x {per_node} x {gpu_name} does not fit"
    for total, gpu_name, per_node, node_count in suggested_totals(result.suggestions):
        other = make_cluster(gpu_name, gpus_per_node=per_node, nodes=node_count)
        replanned = search_plans(spec, other, request.model_copy(update={"global_batch": total}), suggest=False)
        assert replanned.best is not None, f"suggested --global-batch {total} on {other.world_size} does not fit"
    if kind == "total" and size < world:  # a total below the GPU count is named as such, never a bare "no count"
        assert any(f"--global-batch {size} is below the {world} GPUs" in line for line in result.suggestions)
    if kind in ("total", "scaled"):  # "no count fits" holds the total it was asked at
        assert not any(line.endswith(f"fits this model at seq-len {seq_len}") for line in result.suggestions)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(
    model=st.sampled_from(MODELS),
    gpu=st.sampled_from([*SMALL_GPUS, "A100-80GB"]),
    gpu_count=st.sampled_from([1, 2, 4, 8, 16]),
    per_gpu=st.sampled_from([1, 2]),
    strategies=st.sampled_from([None, ("ddp",), ("ddp", "fsdp", "deepspeed")]),
)
def test_every_cluster_the_selector_suggests_fits_at_the_same_per_gpu_batch(model, gpu, gpu_count, per_gpu, strategies):
    """The selector's door (plan_training, behind get_distributed_training_config and the seed CLI): its batch is
    per GPU, so a suggested count is replanned there with the same per-GPU batch, through the same door."""
    from planner.selector.gpu_choice import cluster_for
    from planner.selector.training import plan_training

    spec = resolve_model(model)
    seq_len = min(1024, spec.max_position_embeddings)
    answer = plan_training(spec, cluster_for(resolve_gpu(gpu), gpu_count), per_gpu, strategies=strategies,
                           seq_len=seq_len)  # fmt: skip
    assume(answer.result.best is None)
    named = suggested_clusters(answer.result.suggestions)
    event(f"{len(named)} clusters suggested")
    for gpu_name, per_node, node_count in named:
        other = make_cluster(gpu_name, gpus_per_node=per_node, nodes=node_count)
        replanned = plan_training(spec, other, per_gpu, strategies=strategies, seq_len=seq_len)
        assert replanned.result.best is not None, f"suggested {node_count} x {per_node} x {gpu_name} does not fit"


def test_a_per_gpu_batch_is_held_per_gpu_where_the_selector_looks_for_a_count_that_fits():
    """The seed door's batch_size is per GPU: opt-30b at batch 1 on one A100-80GB is told the count its own
    distributed answer recommends (4), not that no count up to 1024 fits; opt-13b is told 2."""
    from planner.selector.training import plan_training

    for model, fewest in (("opt-30b", 4), ("opt-13b", 2)):
        answer = plan_training(resolve_model(model), make_cluster("A100-80GB", gpus_per_node=1), 1)
        assert answer.result.best is None
        named = suggested_clusters(answer.result.suggestions)
        assert named[0] == ("A100-80GB", fewest, 1), answer.result.suggestions
        bigger = plan_training(resolve_model(model), make_cluster("A100-80GB", gpus_per_node=fewest), 1)
        assert bigger.result.best is not None


def test_a_total_below_the_gpu_count_is_held_and_told_what_fits(capsys):
    """`plan ... --global-batch 1` for opt-30b on 8 A100-80GB: the suggestions hold the total (no count of them
    fits one sequence a step: tensor parallelism over a node does not hold opt-30b), say that a batch below the
    GPU count leaves GPUs without data unless TP/PP splits the model, and name totals that fit, each replanned
    here: 8 on these 8 GPUs, and 4 on 4 (the count the selector recommends at one sequence per GPU). On one
    GPU the same total is held too, and the same 4 on 4 suggested."""
    from hardware_selector_cli.app import main

    spec = resolve_model("opt-30b")
    for per_node, fewest in ((8, [(8, "A100-80GB", 8, 1), (4, "A100-80GB", 4, 1)]), (1, [(4, "A100-80GB", 4, 1)])):
        argv = ["plan", "--model", "opt-30b", "--gpu", "A100-80GB", "--gpus-per-node", str(per_node),
                "--global-batch", "1", "--json"]  # fmt: skip
        assert main(argv) == 1  # nothing fits (docs/errors.md)
        lines = json.loads(capsys.readouterr().out)["suggestions"]
        assert lines[0] == (
            f"no count of A100-80GB from {per_node} up to 1024 fits this model at --global-batch 1 and seq-len 2048"
        )
        assert "without data unless tensor or pipeline parallelism splits the model over them" in lines[1]
        assert suggested_totals(lines) == fewest
        for total, gpu, gpus_per_node, nodes in fewest:
            cluster = make_cluster(gpu, gpus_per_node=gpus_per_node, nodes=nodes)
            assert search_plans(spec, cluster, PlanRequest(global_batch=total), suggest=False).best is not None
        total, gpu, gpus_per_node, nodes = fewest[-1]  # the fewest: half as many GPUs hold no total of theirs
        smaller = make_cluster(gpu, gpus_per_node=gpus_per_node // 2, nodes=nodes)
        assert search_plans(spec, smaller, PlanRequest(global_batch=total // 2), suggest=False).best is None


def test_a_model_too_big_for_its_cluster_is_told_where_it_fits():
    """The case the issue reported: a 70B model on 8 small GPUs gets clusters that really fit."""
    spec = resolve_model("llama-2-70b")
    request = PlanRequest(seq_len=2048)
    result = search_plans(spec, make_cluster("L4", gpus_per_node=8), request)
    assert result.best is None
    named = suggested_clusters(result.suggestions)
    assert named and named[0][0] == "L4" and named[0][1] * named[0][2] > 8  # more L4s first
    assert any(name != "L4" for name, _, _ in named)  # then bigger GPUs at this count
    for gpu_name, per_node, node_count in named:
        assert search_plans(spec, make_cluster(gpu_name, per_node, node_count), request).best is not None


def test_a_batch_that_divides_over_no_layout_is_named_and_no_false_count_is_claimed(capsys):
    """DeepSeek-V3 on 2048 H800s at a global batch of 15360 (its report's) without our engine: no data-parallel
    layout divides the batch, which the suggestions say instead of claiming that no count of H800 fits (1024 of
    them do, planned below). With the engine, pipeline stages make the data-parallel size divide it, as the
    report's own pp x ep layout did."""
    from hardware_selector_cli.app import main

    base = ["plan", "--model", "deepseek-v3", "--gpu", "H800", "--gpus-per-node", "8", "--seq-len", "4096",
            "--global-batch", "15360", "--json"]  # fmt: skip
    main([*base, "--nodes", "256", "--strategies", "ddp,fsdp,deepspeed"])
    lines = json.loads(capsys.readouterr().out)["suggestions"]
    assert any("--global-batch 15360 is not a multiple of the 2048 GPUs" in line for line in lines)
    assert not any("no count of H800" in line for line in lines)
    assert main([*base, "--nodes", "128", "--strategies", "ddp,fsdp,deepspeed"]) == 0
    assert json.loads(capsys.readouterr().out)["best"] is not None
    assert main([*base, "--nodes", "256"]) == 0
    layout = json.loads(capsys.readouterr().out)["best"]["config"]["layout"]
    assert layout["pp"] > 1 and layout["ep"] > 1


def test_fewest_is_the_fewest_count_tried_and_a_batch_that_does_not_split_is_named():
    """Found by an audit: on 3 nodes of 2 CPUs a global batch of 8 fits nowhere (6 ranks do not split it), and the
    answer said "8 x cpu is the fewest that fits" though 1, 2 and 4 CPUs fit: fewest_gpus looked only upward.
    Reference: the search itself on every count the suggestions try."""
    from planner.search.suggest import PLAN_FLAGS, _sizes

    spec = resolve_model("gpt2")
    cluster = make_cluster("cpu", gpus_per_node=2, nodes=3)
    request = PlanRequest(seq_len=32, global_batch=8, strategies=("fsdp",))
    result = search_plans(spec, cluster, request)
    assert result.best is None
    line = next(line for line in result.suggestions if FEWEST.match(line))
    count, gpu, per_node, nodes = FEWEST.match(line).groups()

    def fits(world: int, gpus_per_node: int) -> bool:
        other = make_cluster(gpu, gpus_per_node=gpus_per_node, nodes=world // gpus_per_node)
        return search_plans(spec, other, request.model_copy(update={"top_k": 1}), suggest=False).best is not None

    assert fits(int(count), int(per_node))
    tried = [size for size in _sizes(cluster, PLAN_FLAGS) if size.world_size < int(count)]
    assert not any(fits(size.world_size, size.gpus_per_node) for size in tried), line
    up = re.search(r", (\d+) x \S+ \(--gpus-per-node (\d+) --nodes (\d+)\) the next count up", line)
    assert up is not None and int(up.group(1)) > cluster.world_size and fits(int(up.group(1)), int(up.group(2)))
    assert "6 GPUs do not split --global-batch 8 evenly" in line  # the cause, not memory


def test_an_elastic_range_without_the_asked_node_count_is_said_before_whether_a_plan_fits(tmp_path):
    """The same request with `--emit DIR --elastic 1:2` on 3 nodes answered with the fewest-GPUs line alone,
    hiding that 3 nodes lie outside 1:2; --nodes 4 gave the range's own message."""
    from tests.distributed import cli_in_process

    asked = ["plan", "-m", "gpt2", "--gpu", "cpu", "--gpus-per-node", "2", "--seq-len", "32", "--global-batch", "8"]
    asked += ["--strategies", "fsdp", "--nodes", "3", "--emit", tmp_path / "run", "--elastic", "1:2"]
    completed = cli_in_process(*asked)
    assert completed.returncode == 2 and "Traceback" not in completed.stderr
    (line,) = completed.stderr.strip().splitlines()
    assert "--elastic 1:2 does not hold the plan's own 3 node(s)" in line, line


def test_a_suggested_count_keeps_the_host_ram_the_user_gave():
    """--cpu-ram-gb 64 on one A100-40GB: offloaded plans need more host RAM than that, so "2 x A100-40GB is the
    fewest that fits" (planned on the catalog's default RAM, where offload fits) failed when planned as printed (a new
    user's audit, 2026-11-30). A suggestion now keeps the user's RAM per node and prints it, and fits so."""
    spec = resolve_model("llama-2-13b")
    cluster = make_cluster("A100-40GB", gpus_per_node=1, nodes=1, cpu_ram_gb=64)
    request = PlanRequest(seq_len=2048, global_batch=8)
    result = search_plans(spec, cluster, request)
    assert result.best is None
    fewest = re.compile(r"^(\d+) x (\S+) \(--gpus-per-node (\d+) --nodes (\d+) --cpu-ram-gb (\d+)\) is the fewest")
    matches = [match.groups() for line in result.suggestions if (match := fewest.match(line))]
    assert matches, result.suggestions
    for _, gpu, per_node, nodes, ram in matches:
        assert ram == "64"
        other = make_cluster(gpu, gpus_per_node=int(per_node), nodes=int(nodes), cpu_ram_gb=int(ram))
        assert search_plans(spec, other, request.model_copy(update={"top_k": 1}), suggest=False).best is not None


def test_host_ram_the_user_gave_is_kept_even_at_the_shapes_default():
    """The cluster records that the RAM was stated: a figure equal to the shape's default was read as unstated
    before (compared with the default), and a suggestion of another GPU count then planned on that count's default."""
    default_gib = default_cpu_ram_per_node(resolve_gpu("A100-40GB"), 1)[0] / GIB
    assert stated_host_ram_gib(make_cluster("A100-40GB", gpus_per_node=1, cpu_ram_gb=default_gib)) == default_gib
    assert stated_host_ram_gib(make_cluster("A100-40GB", gpus_per_node=1)) is None
    assert stated_host_ram_gib(make_cluster("cpu", gpus_per_node=2, cpu_ram_gb=8)) is None  # the host's, always
