"""Why a tune trial missed its prediction, when the links say: the collective that carries most of its bytes,
the per-rank bandwidth the throughput model assumed for it, and the one measured here (docs/running.md, "Tune").

The model (planner/throughput/communication.py) moves a plan's data-parallel traffic as all-reduces (DDP,
ZeRO-0), reduce-scatters (ZeRO-1/2) or all-gathers (ZeRO-3, FSDP), and its tensor-parallel traffic as
all-reduces; each over a link of the cluster's bandwidth times the model's link efficiency. The trials probe
each collective's bus bandwidth once per launch (backends/monitoring/link_probe.py), in the model's own units,
so the sentence compares like with like: "its all-gathers (predicted 0.41 s of its 1.7 s step at 2.1 GB/s
per rank) ran here at 0.62 GB/s: 100% of the gap". A collective is named only when its time at the measured rate
moves the step by a material share of the gap; otherwise the line says the gap is not the links.
"""

from __future__ import annotations

from planner.contract.choices import FsdpSharding, Strategy
from planner.hardware.cluster import ClusterSpec
from planner.throughput.constants import ThroughputConstants
from planner.throughput.result import ThroughputEstimate
from planner.training_config import TrainingConfig

# The share of a trial's miss its collective must account for, at the rate measured here, to be named as its cause.
MIN_GAP_SHARE = 0.25


def assumed_link_GBps(cluster: ClusterSpec) -> float:
    """The per-rank bandwidth the model assumes within a node (a tune measures one node)."""
    return cluster.intra_node_bandwidth_GBps * ThroughputConstants().link_efficiency


def assumed_link_source(cluster: ClusterSpec) -> str:
    """Where assumed_link_GBps comes from: the intra-node bandwidth's source (the catalog's link, make_cluster's
    intra_bw, or PCIe where a bridge joins pairs only; the cluster's assumption line) times the link efficiency."""
    link = next(
        (line for line in cluster.assumptions if line.startswith("intra-node:") or "talk over PCIe" in line),
        f"intra-node: {cluster.intra_node_bandwidth_GBps:g} GB/s/dir",
    )
    efficiency = ThroughputConstants().link_efficiency
    return f"the intra-node link [{link}] x link efficiency {efficiency:g} [assumed, planner/throughput/constants.py]"


def dominant_collective(config: TrainingConfig, predicted: ThroughputEstimate | None) -> tuple[str, float] | None:
    """(the collective carrying most of the plan's predicted traffic, its predicted seconds per step)."""
    if predicted is None:
        return None
    traffic = predicted.breakdown
    if traffic.tensor_parallel_comm_s > traffic.data_parallel_comm_s:
        return "all-reduce", traffic.tensor_parallel_comm_s
    if config.strategy is Strategy.DDP or (config.strategy is not Strategy.FSDP and config.zero_stage == 0):
        kind = "all-reduce"
    elif config.strategy is Strategy.FSDP:
        kind = "all-reduce" if config.fsdp_sharding is FsdpSharding.NONE else "all-gather"
    else:
        kind = "all-gather" if config.zero_stage == 3 else "reduce-scatter"
    return kind, traffic.data_parallel_comm_s


def link_sentence(
    collective: str | None,
    comm_s: float | None,
    step_s: float | None,
    measured_s: float | None,
    links: dict[str, float],
    assumed: float,
) -> str:
    """What the links measured here say of a trial's miss (measured_s against step_s predicted): its dominant
    collective is named when, at the rate measured here instead of the assumed one, it accounts for a material
    share of the gap (MIN_GAP_SHARE); otherwise the gap is said not to be the links. "" when the links were not
    measured."""
    if not collective or not comm_s or not step_s or not measured_s or collective not in links or not assumed:
        return ""
    rate, gap = links[collective], measured_s - step_s
    if not gap:
        return ""
    moved = comm_s * assumed / rate - comm_s  # the collective's seconds at the measured rate, less the predicted
    share = moved / gap
    if share >= MIN_GAP_SHARE:
        return (
            f"; its {collective}s (predicted {comm_s:.3g} s of its {step_s:.3g} s step at {assumed:.3g} GB/s per "
            f"rank) ran here at {rate:.3g} GB/s: {min(share, 1):.0%} of the gap"
        )
    return (
        f"; not the links: its {collective}s at the {rate:.3g} GB/s per rank measured here (the plan assumed "
        f"{assumed:.3g}) move its step by {moved:+.2g} s of the {gap:+.3g} s gap; the rest is compute, at this "
        "machine's speed"
    )
