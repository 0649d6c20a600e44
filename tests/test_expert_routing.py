"""Expert routing in the planner: an uneven router and the engine's capacity factor (planner/expert_routing.py).

References: the engine's own capacity rule (backends/expert_parallel/dispatch.py: a sender keeps at most
ceil(c * T * k / E) assignments per expert), replayed on skewed routings to count what each expert-parallel
rank receives and what is dropped; and, for the estimators, the same model with a router that picks more
experts per token (an uneven router's busiest rank does the routed work of that many).
"""

from __future__ import annotations

import json

import pytest
import torch

from backends.expert_parallel.dispatch import expert_capacity
from hardware_selector_cli.app import main
from planner.expert_routing import ExpertRouting
from planner.memory.activation_batch import estimate_activations
from planner.memory.activations import activation_widths
from planner.models.resolve import resolve_model
from planner.training_config import TrainingConfig

MIXTRAL = resolve_model("mixtral-8x7b")


def _replay(routings: list[torch.Tensor], experts: int, ep: int, capacity_factor: float) -> tuple[float, float, float]:
    """(offered, run, dropped share) of the busiest rank, in even shares, under the engine's capacity rule.

    routings: one (tokens, k) tensor of expert indices per sending rank."""
    local = experts // ep
    offered = torch.zeros(ep, dtype=torch.float64)
    run = torch.zeros(ep, dtype=torch.float64)
    total = 0
    for top_k_index in routings:
        tokens, top_k = top_k_index.shape
        total += tokens * top_k
        counts = torch.bincount(top_k_index.reshape(-1), minlength=experts).double()
        cap = expert_capacity(tokens, top_k, experts, capacity_factor)
        kept = counts if cap is None else counts.clamp(max=cap)
        offered += counts.reshape(ep, local).sum(1)
        run += kept.reshape(ep, local).sum(1)
    even = total / ep
    busiest = int(torch.argmax(offered))
    return float(offered[busiest] / even), float(run[busiest] / even), float(1 - run[busiest] / offered[busiest])


def _skewed(senders: int, tokens: int, experts: int, top_k: int, hot_share: float, hot: list[int]) -> list:
    """Routings where each sender gives the `hot` experts `hot_share` of its assignments, evenly among them."""
    per_sender = tokens * top_k
    hot_count = round(per_sender * hot_share / len(hot))
    cold = [e for e in range(experts) if e not in hot]
    cold_count = (per_sender - hot_count * len(hot)) // len(cold)
    flat = sum(([e] * hot_count for e in hot), []) + sum(([e] * cold_count for e in cold), [])
    assert len(flat) == per_sender
    return [torch.tensor(flat).reshape(tokens, top_k) for _ in range(senders)]


@pytest.mark.parametrize(
    ("ep", "hot_share", "capacity", "expected_load"),
    [
        (2, 0.75, 0.0, 1.5),  # rank 0's experts get 3/4 of the assignments: 1.5 even shares, none dropped
        (2, 0.75, 1.25, 1.25),  # capacity 1.25 caps each of its experts: 1.25 run, 1/6 dropped
        (4, 0.25, 0.5, 0.5),  # an even router under capacity 0.5 drops half
        (1, 0.75, 0.0, 1.0),  # ep 1: every expert is local, the rank runs everything
    ],
)
def test_the_busiest_rank_runs_what_the_engines_capacity_rule_leaves(ep, hot_share, capacity, expected_load):
    experts = 8
    hot = list(range(experts // max(ep, 2)))  # rank 0's experts (ep 1: half of them)
    routings = _skewed(senders=max(ep, 2), tokens=64, experts=experts, top_k=2, hot_share=hot_share, hot=hot)
    offered, run, dropped = _replay(routings, experts, ep, capacity)
    routing = ExpertRouting(capacity_factor=capacity, load_imbalance=offered if ep > 1 else 1.0)
    assert run == pytest.approx(expected_load)
    assert routing.busiest_rank_load(ep) == pytest.approx(run, rel=1e-9)
    assert routing.dropped_share(ep) == pytest.approx(dropped, abs=1e-9)


def test_on_a_random_skewed_router_the_load_is_an_upper_bound_and_the_drops_a_lower_one():
    """A Zipf-like router (hot experts spread over ranks): the planner's load from the measured imbalance never
    undercounts the busiest rank's work, and its drop share never overcounts."""
    generator = torch.Generator().manual_seed(0)
    experts, ep, top_k = 16, 4, 2
    weights = 1.0 / torch.arange(1, experts + 1).float() ** 0.8
    routings = [
        torch.stack([torch.multinomial(weights, top_k, generator=generator) for _ in range(256)]) for _ in range(ep)
    ]
    for capacity in (0.0, 1.0, 1.25, 2.0):
        offered, run, dropped = _replay(routings, experts, ep, capacity)
        routing = ExpertRouting(capacity_factor=capacity, load_imbalance=offered)
        assert offered > 1.2  # the router is uneven enough to matter
        assert run <= routing.busiest_rank_load(ep) + 1e-9
        assert dropped >= routing.dropped_share(ep) - 1e-9


def _moe_config(**routing) -> TrainingConfig:
    return TrainingConfig(
        strategy="engine", zero_stage=1, layout={"ep": 8}, seq_len=4096, micro_batch=1, routing=ExpertRouting(**routing)
    )


def test_uneven_routing_costs_the_routed_activations_of_more_experts_per_token():
    """The busiest rank keeps 1.5x the routed activations: what a router choosing 1.5 x k experts keeps."""
    uneven = _moe_config(load_imbalance=1.5)
    widths = activation_widths(uneven, native_mixed=False)
    wider = MIXTRAL.model_copy(update={"experts_per_token": MIXTRAL.experts_per_token * 1.5})
    measured = estimate_activations(MIXTRAL, uneven, widths).activations
    assert measured == pytest.approx(estimate_activations(wider, _moe_config(), widths).activations, rel=1e-9)
    assert measured > estimate_activations(MIXTRAL, _moe_config(), widths).activations


def test_uneven_routing_slows_the_step_but_not_the_model_flops():
    from planner.hardware.cluster import make_cluster
    from planner.throughput.estimate import estimate_throughput

    cluster = make_cluster("H100-80GB", gpus_per_node=8, nodes=2)
    even = estimate_throughput(MIXTRAL, _moe_config(), cluster)
    uneven = estimate_throughput(MIXTRAL, _moe_config(load_imbalance=1.5), cluster)
    capped = estimate_throughput(MIXTRAL, _moe_config(load_imbalance=1.5, capacity_factor=1.1), cluster)
    assert even.step_time_s < capped.step_time_s < uneven.step_time_s
    # Both the experts' matmuls and the all-to-all (tp 1: the only "tensor-parallel" traffic) wait for it.
    assert even.breakdown.compute_s < capped.breakdown.compute_s < uneven.breakdown.compute_s
    exchange = uneven.breakdown.tensor_parallel_comm_s / even.breakdown.tensor_parallel_comm_s
    assert 1.45 < exchange <= 1.5  # 1.5x the bytes; the per-message latency does not grow
    assert uneven.mfu < even.mfu
    assert uneven.tokens_per_s * uneven.step_time_s == pytest.approx(even.tokens_per_s * even.step_time_s)


def _cli(capsys, *args: str) -> tuple[int, str]:
    code = main(["estimate", "--model", "mixtral-8x7b", "--gpu", "H100-80GB", "--nodes", "2", *args])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--strategy", "engine", "--ep", "8", "--expert-imbalance", "0.5"], "--expert-imbalance must be at least 1"),
        (["--strategy", "fsdp", "--expert-capacity", "1.25"], "add --strategy engine"),
        (["--strategy", "engine", "--expert-capacity", "nan"], "--expert-capacity must be a finite number"),
    ],
)
def test_bad_routing_input_is_one_line(capsys, args, message):
    code, output = _cli(capsys, *args)
    assert code == 2
    assert message in output and "Traceback" not in output
    assert len(output.strip().splitlines()) == 1


def test_a_dense_model_refuses_router_settings_in_one_line(capsys):
    code = main(["plan", "--model", "llama-3-8b", "--gpu", "H100-80GB", "--expert-imbalance", "1.3"])
    output = capsys.readouterr()
    assert code == 2 and "has no experts" in output.err + output.out


def test_the_estimate_states_the_routing_it_assumed(capsys):
    code, output = _cli(capsys, "--strategy", "engine", "--ep", "8", "--json")
    assert code == 0
    notes = " ".join(json.loads(output)["memory"]["notes"])
    assert "an even router assumed" in notes
    code, output = _cli(capsys, "--strategy", "engine", "--ep", "8", "--expert-imbalance", "1.4",
                        "--expert-capacity", "1.25", "--json")  # fmt: skip
    notes = " ".join(json.loads(output)["memory"]["notes"])
    assert "1.25x an even share" in notes and "drops at least 11%" in notes


def test_the_plan_says_what_it_assumed_of_the_router(capsys):
    args = ["plan", "--model", "mixtral-8x7b", "--gpu", "H100-80GB", "--nodes", "4", "--global-batch", "512",
            "--seq-len", "4096", "--strategies", "engine", "--expert-imbalance", "1.3", "--no-calibration", "--json"]  # fmt: skip
    assert main(args) == 0
    plans = json.loads(capsys.readouterr().out)["candidates"]
    with_ep = [plan for plan in plans if plan["config"]["layout"]["ep"] > 1]
    assert with_ep and all(plan["config"]["routing"]["load_imbalance"] == 1.3 for plan in plans)
    assert all(any("1.30x an even share" in reason for reason in plan["reasons"]) for plan in with_ep)


def test_the_emitted_engine_json_carries_the_capacity_the_plan_assumed(tmp_path):
    """The planned capacity is the one the engine drops tokens at (engine.json's expert_capacity_factor)."""
    from emit_plans import make_plan

    from planner.contract.engine_config import load_engine_config
    from planner.rundir.write import emit_run_folder

    plan = make_plan(
        "mixtral-8x7b", gpu="h100-80gb", gpus_per_node=8, nodes=2, strategy="engine", zero_stage=1,
        layout={"ep": 8}, precision="bf16-mixed", routing=ExpertRouting(capacity_factor=1.25, load_imbalance=1.3),
    )  # fmt: skip
    emit_run_folder(plan, tmp_path / "run")
    block = load_engine_config(tmp_path / "run" / "engine.json").hardware_selector
    assert block.expert_capacity_factor == 1.25 and block.layout.ep == 8
