"""`plan --objective cost --clouds ...`: the cheapest cloud x GPU x count that trains the tokens by a deadline.

One option group (option_groups.py) and the run of it: parse the flags, load the price catalog
(planner/cost/prices.py), search each GPU and count with the strategy search, rank the clouds
(planner/cost/cloud_search.py) and print (cost_table.py). docs/search.md, "Cost across clouds".
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import typer

from planner.errors import UserInputError

PREEMPTION_HELP = (
    "With --spot: preemptions per rented instance per hour, an assumption (default 0.05: one per instance every "
    "20 hours); each loses half a checkpoint interval plus --restart-minutes."
)


@dataclass
class CostOptions:
    clouds: str | None
    deadline: str | None
    spot: bool
    preemption_rate: float | None
    restart_minutes: float | None
    price_catalog: Path | None
    max_gpus: int | None

    def given(self) -> list[str]:
        flags = {
            "--deadline": self.deadline is not None,
            "--spot": self.spot,
            "--preemption-rate": self.preemption_rate is not None,
            "--restart-minutes": self.restart_minutes is not None,
            "--price-catalog": self.price_catalog is not None,
            "--max-gpus": self.max_gpus is not None,
        }
        return [flag for flag, set_ in flags.items() if set_]


def cost_options(
    clouds: str | None = typer.Option(
        None,
        "--clouds",
        help="With --objective cost: price the run on these clouds, e.g. aws,gcp,lambda (the catalog also has "
        "azure, coreweave, runpod), and pick the cheapest GPU and count that meets --deadline.",
    ),
    deadline: str | None = typer.Option(
        None, "--deadline", help="With --clouds: train --tokens within this time, e.g. 7d, 36h (default 30d)."
    ),
    spot: bool = typer.Option(False, "--spot", help="With --clouds: spot prices, with what preemption costs."),
    preemption_rate: float | None = typer.Option(None, "--preemption-rate", help=PREEMPTION_HELP),
    restart_minutes: float | None = typer.Option(
        None, "--restart-minutes", help="With --spot: minutes to replace an instance and resume, an assumption (10)."
    ),
    price_catalog: Path | None = typer.Option(
        None, "--price-catalog", help="With --clouds: your own price catalog (YAML, the shape of the project's)."
    ),
    max_gpus: int | None = typer.Option(
        None, "--max-gpus", help="With --clouds: the most GPUs to consider (default 256)."
    ),
) -> CostOptions:
    return CostOptions(clouds, deadline, spot, preemption_rate, restart_minutes, price_catalog, max_gpus)


def check_cost_flags(cost: CostOptions, objective: str, cluster) -> None:
    """--clouds goes with --objective cost, and the other cost flags with --clouds; the count is searched."""
    if cost.clouds is None:
        if cost.given():
            raise UserInputError(
                f"{', '.join(cost.given())}: only for the search across clouds; add --clouds (and --objective cost)"
            )
        return
    if objective.strip().lower() != "cost":
        raise UserInputError(f"--clouds ranks by cost; use --objective cost, not {objective!r}")
    if cluster.nodes != 1 or cluster.gpus_per_node != 8:
        raise UserInputError("--clouds searches the GPU count; drop --nodes/--gpus-per-node (bound it with --max-gpus)")
    if cost.spot is False and (cost.preemption_rate is not None or cost.restart_minutes is not None):
        raise UserInputError("--preemption-rate and --restart-minutes price spot preemptions; add --spot or drop them")


def cost_request(cost: CostOptions, tokens: float, price: float | None, save_every: int | None):
    from planner.cost.cloud_search import DEFAULT_MAX_GPUS, CostRequest
    from planner.cost.durations import parse_duration
    from planner.cost.preemption import DEFAULT_PREEMPTION_RATE, DEFAULT_RESTART_MINUTES
    from planner.cost.prices import catalog_today
    from planner.limits import MAX_GPUS, check_count, check_number

    deadline_s = parse_duration(cost.deadline if cost.deadline is not None else "30d", "--deadline")
    rate = (
        check_number("--preemption-rate", cost.preemption_rate, high=1e3) if cost.preemption_rate is not None else None
    )
    restart = (
        check_number("--restart-minutes", cost.restart_minutes, high=1e5) if cost.restart_minutes is not None else None
    )
    return CostRequest(
        tokens=tokens,
        deadline_s=deadline_s,
        spot=cost.spot,
        price_override=price,
        max_gpus=check_count("--max-gpus", cost.max_gpus, high=MAX_GPUS)
        if cost.max_gpus is not None
        else DEFAULT_MAX_GPUS,
        **({} if save_every is None else {"checkpoint_every_steps": save_every}),
        preemption_rate=DEFAULT_PREEMPTION_RATE if rate is None else rate,
        restart_s=(DEFAULT_RESTART_MINUTES if restart is None else restart) * 60,
        today=catalog_today(),
    )


def run_cost_plan(model, cluster, search, routing, cost: CostOptions, save_every, db, no_calibration, as_json) -> None:
    """Search, rank and print; the winner or one line saying what would meet the deadline."""
    from planner.calibration_lines import line_for_plan
    from planner.cost.checked_prices import load_price_catalog
    from planner.cost.cloud_search import cheapest_across_clouds
    from planner.cost.deadline_advice import require_option
    from planner.cost.prices import parse_clouds
    from planner.hardware.cluster import make_cluster
    from planner.search import Objective, search_plans
    from planner.search.request import default_seq_len
    from planner.search.strategy_layout import family_label

    from .calibration_hook import search_calibration
    from .cost_table import cost_document, print_cost

    assert cost.clouds is not None
    clouds = parse_clouds(cost.clouds)
    catalog = load_price_catalog(cost.price_catalog)
    entries = catalog.for_clouds(clouds)
    if cluster.gpu:
        from planner.hardware.gpus import resolve_gpu

        wanted = resolve_gpu(cluster.gpu).name
        entries = [entry for entry in entries if entry.gpu == wanted]
        if not entries:
            raise UserInputError(f"--gpu {cluster.gpu}: none of {', '.join(clouds)} has a price for it in the catalog")
    if cost.spot and cluster.price_per_hour is None and not any(entry.spot for entry in entries):
        with_spot = sorted({entry.cloud for entry in catalog.prices if entry.spot is not None})
        raise UserInputError(
            f"--spot: the price catalog has no spot price for {', '.join(clouds)}; drop --spot, or add a cloud "
            f"that has one ({', '.join(with_spot) or 'none'})"
        )
    search.check(emitting=False)
    if cluster.price_per_hour is not None:
        from planner.limits import MAX_PRICE_PER_HOUR, check_number

        check_number("--price (USD per GPU-hour)", cluster.price_per_hour, high=MAX_PRICE_PER_HOUR)
    spec = model.resolve()
    request = search.request(search.seq_len or default_seq_len(spec), routing)
    request = request.model_copy(update={"objective": Objective.THROUGHPUT})  # every GPU of each count
    priced = cost_request(cost, request.tokens_to_train(spec.params.total), cluster.price_per_hour, save_every)
    calibrations: dict[str, str] = {}
    plan_lines: dict[tuple[str, int, int], str] = {}  # per GPU and count: its fastest plan's calibration
    fabrics: dict[str, str] = {}  # per GPU: the network the multi-node options are planned on

    def plan_speed(gpu: str, per_node: int, nodes: int):
        target = make_cluster(
            gpu,
            gpus_per_node=per_node,
            nodes=nodes,
            interconnect=cluster.interconnect,
            cpu_ram_gb=cluster.cpu_ram_gb,
            nvme_gb=cluster.nvme_gb,
            nvme_gbps=cluster.nvme_gbps,
        )
        adjust, line = search_calibration(spec, target, db=db, off=no_calibration)
        calibrations.setdefault(gpu, line)
        if nodes > 1:
            fabrics.setdefault(gpu, fabric_assumed(target, cluster.interconnect))
        try:
            best = search_plans(spec, target, request, adjust, calibration=line, suggest=False).best
        except UserInputError:
            return None  # this GPU and count cannot run the request (a batch it cannot split, fp8 it lacks)
        if best is None or best.throughput is None:
            return None
        # What the records did to this plan at this count (a GPU's summary may name records of another count).
        plan_lines[(gpu, per_node, nodes)] = line_for_plan(line, gpu, best.config, best.throughput) or line
        return family_label(best.config), best.throughput.tokens_per_s, best.throughput.step_time_s

    result = cheapest_across_clouds(entries, priced, plan_speed)
    best = require_option(result, priced)
    best_line = plan_lines.get((best.gpu, best.gpus_per_node, best.nodes), calibrations.get(best.gpu, ""))
    if as_json:
        import json

        print(json.dumps(cost_document(result, calibrations, fabrics, best_line), indent=2))
        return
    print_cost(result, best, f"{spec.name}, seq {request.seq_len}", best_line, fabrics)


def fabric_assumed(target, interconnect: str | None) -> str:
    """The network a multi-node option is planned on, and why that one: the price catalog records what each
    offer costs, not how its nodes are connected (docs/search.md, "Cost across clouds")."""
    why = (
        "--interconnect"
        if interconnect
        else "the GPU's typical; the price catalog does not record each cloud's network"
    )
    return (
        f"{target.gpus_per_node} GPUs per node ({target.intra_node_bandwidth_GBps:g} GB/s inside a node), "
        f"{target.inter_node_preset} between nodes ({target.inter_node_bandwidth_GBps:g} GB/s) [{why}]"
    )
