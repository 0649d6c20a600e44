"""The cluster a plan targets: which GPU, how many per node, how many nodes, and the links between them.

Bandwidth convention, everywhere in ClusterSpec: GB/s (10**9 bytes/s) per GPU,
per direction. That is what one rank can push while it also receives the same
amount, so a ring all-reduce over n ranks takes about 2 (n-1)/n * bytes / bandwidth.
NVIDIA quotes NVLink bidirectionally (A100: "600 GB/s" = 300 per direction);
networks are quoted in Gb/s (bits) per direction, so a 400 Gb/s NDR port is 50 GB/s.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from planner.errors import UserInputError
from planner.hardware.gpus import GpuSpec, find_gpu, multi_node_priced, pcie_bandwidth_GBps_per_direction, resolve_gpu
from planner.hardware.networks import choose_preset
from planner.limits import (
    MAX_BANDWIDTH_GBPS,
    MAX_GIB,
    MAX_GPUS,
    MAX_GPUS_PER_NODE,
    MAX_PRICE_PER_HOUR,
    check_count,
    check_name,
    check_number,
)

GIB = 2**30


# Per-hop latency inside a node, µs; assumptions, as the networks' latencies are (planner/hardware/networks.py).
INTRA_NODE_LATENCY_US: dict[str, float] = {
    "nvlink": 3.0,
    "infinity-fabric": 3.0,
    "pcie": 5.0,
    # gloo over loopback TCP: a 2-rank all-reduce of a small tensor took 361 us on the
    # build machine (benchmarks/results/cpu_profile.json); a ring all-reduce is 2(n-1)
    # latency steps, so one step is ~180 us.
    "host-memory": 180.0,
}

# ASSUMED host RAM per GPU when the user gives none (--cpu-ram-gb), and why: the plan prints the reason beside
# the figure. The SXM and OAM figures are kept below what the 8-GPU servers in MLPerf's system descriptions carry,
# on purpose (an offloading plan that fits this fits those, beside the OS, the page cache and the data loaders):
# NVIDIA DGX A100, 2 TB (mlcommons/training_results_v0.7 NVIDIA/systems/dgxa100_ngc20.06_pytorch.json, 8 x
# A100-SXM4-40GB) and DGX H100, 2 TB (mlcommons/inference_results_v4.1 closed/NVIDIA/systems/
# DGX-H100_H100-SXM-80GBx8_TRT.json): 250 GB per GPU; AMD's 8 x MI300X Supermicro AS-8125GS-TNMR2, 1.5 TiB
# (inference_results_v4.1 closed/AMD/systems/8xMI300X_2xEPYC-9374F.json): 192 GiB per GPU. docs/hardware.md.
DEFAULT_HOST_RAM_PER_GPU_BYTES: dict[str, int] = {
    "SXM": 128 * GIB,
    "OAM": 128 * GIB,
    "PCIe": 64 * GIB,
}
HOST_RAM_WHY = {
    "SXM": "128 GiB per SXM GPU, half of the 2 TB that MLPerf's DGX A100 and DGX H100 carry for 8 GPUs "
    "(their system descriptions; kept low on purpose)",
    "OAM": "128 GiB per OAM GPU, two thirds of the 1.5 TiB that AMD's MLPerf 8 x MI300X server carries "
    "(its system description; kept low on purpose)",
    "PCIe": "64 GiB per PCIe GPU, half an SXM server's (a guess: PCIe servers vary)",
}
CONSUMER_HOST_RAM_PER_GPU_BYTES = 32 * GIB
CONSUMER_HOST_RAM_WHY = "32 GiB per consumer or workstation GPU (a guess: desktops vary)"

# ASSUMED, not measured: NVMe read/write bandwidth per node when the user gives none (a few PCIe Gen4 drives
# striped), GB/s. Drives and RAID layouts differ by several times; measure yours with DeepSpeed's NVMe benchmark
# (its ds_io / aio sweep, described in microsoft/DeepSpeed issue #998) and pass --nvme-gbps (nvme_gbps=).
DEFAULT_NVME_GBPS_PER_NODE = 6.0


class ClusterSpec(BaseModel):
    """Nodes of identical GPUs. Bandwidths: GB/s per GPU per direction (see module docstring)."""

    model_config = ConfigDict(frozen=True)

    gpu: GpuSpec
    gpus_per_node: int = Field(ge=1)
    num_nodes: int = Field(ge=1)
    inter_node_preset: str
    intra_node_bandwidth_GBps: float = Field(gt=0)
    inter_node_bandwidth_GBps: float = Field(ge=0)
    intra_node_latency_us: float = Field(ge=0)
    inter_node_latency_us: float = Field(ge=0)
    cpu_ram_per_node_bytes: int = Field(gt=0)
    # True where the host RAM was given (--cpu-ram-gb, cpu_ram_gb=, or detect's reading), not the shape's default:
    # suggestions of other GPU counts keep a stated figure (planner/search/suggest.py).
    cpu_ram_stated: bool = False
    nvme_per_node_bytes: int | None = Field(default=None, ge=0)
    # NVMe read/write bandwidth per node (GB/s) the user gave; None: DEFAULT_NVME_GBPS_PER_NODE, an assumption.
    nvme_GBps_per_node: float | None = Field(default=None, gt=0)
    # Each GPU's bandwidth to and from CPU memory (GB/s per direction) when all the node's GPUs move data at once, as
    # a source measured it (ZeRO-Infinity on a DGX-2: about 3 GB/s, Section 5.2.3 and Figure 2(b)); None: the GPU's PCIe link
    # at the link efficiency, an assumption.
    # Left out of the plan's JSON: only the published-runs validator sets it (no flag of ours takes it).
    host_GBps_per_gpu: float | None = Field(default=None, gt=0, exclude=True)
    # Where each default came from, for the plan's "assumptions" section.
    assumptions: list[str] = Field(default_factory=list)

    @property
    def world_size(self) -> int:
        return self.gpus_per_node * self.num_nodes

    @property
    def is_multi_node(self) -> bool:
        return self.num_nodes > 1

    @property
    def total_gpu_memory_bytes(self) -> int:
        return self.gpu.memory_bytes * self.world_size

    @property
    def cpu_ram_per_gpu_bytes(self) -> int:
        return self.cpu_ram_per_node_bytes // self.gpus_per_node

    def nvme_bandwidth(self) -> tuple[float, str]:
        """NVMe read/write GB/s per node for ZeRO-Infinity's offload time, and where the figure comes from."""
        return nvme_bandwidth(self.nvme_GBps_per_node)

    def with_nodes(self, nodes: int) -> ClusterSpec:
        """The same nodes, `nodes` of them (an elastic run's fallbacks), as `make_cluster(nodes=...)` gives them:
        a one-node cluster grown to several takes the multi-node price of a catalog GPU, and, where it has no
        network (none named), the GPU's typical one; a bandwidth the user gave (--inter-bw) is kept. A multi-node
        cluster shrunk to one node (a lost node's fallback) keeps its whole-server price: what remains is one of
        the servers rented."""
        if nodes <= 1 or self.is_multi_node:
            return self.model_copy(update={"num_nodes": nodes})
        assumptions, gpu = list(self.assumptions), self.gpu
        update: dict[str, object] = {"num_nodes": nodes}
        if gpu == find_gpu(gpu.name):  # catalog-priced: rented as a multi-node cluster is (make_cluster)
            gpu = multi_node_priced(gpu.name)
            assumptions = [line for line in assumptions if not line.startswith("price: ")]
            overrides = "; --price overrides it" if gpu.price_usd_per_hour is not None else ""
            assumptions.append(f"price: {gpu.price_note()}{overrides}")
        if self.inter_node_preset == "none":
            preset = choose_preset(gpu, nodes, None, assumptions)
            update |= {
                "inter_node_preset": preset.name,
                # "none" has no bandwidth: one here is the user's (make_cluster's inter_bw), kept.
                "inter_node_bandwidth_GBps": self.inter_node_bandwidth_GBps or preset.GBps_per_gpu(self.gpus_per_node),
                "inter_node_latency_us": preset.latency_us,
            }
        return self.model_copy(update={**update, "gpu": gpu, "assumptions": assumptions})

    @property
    def price_usd_per_hour(self) -> float | None:
        """Whole cluster, from the GPU's (possibly overridden) price per GPU-hour; None where it has no price."""
        price = self.gpu.price_usd_per_hour
        return None if price is None else price * self.world_size


def default_intra_node_bandwidth(gpu: GpuSpec, gpus_per_node: int) -> tuple[float, str]:
    """Per-direction GB/s between GPUs of one node, and why."""
    link = gpu.interconnect
    if link.reach == "pair" and gpus_per_node > 2:
        # A bridge joins two cards; a collective over more GPUs is held back by PCIe.
        pcie = pcie_bandwidth_GBps_per_direction(gpu.pcie_generation or 3)
        return (
            pcie,
            f"{link.generation} joins pairs only; {gpus_per_node} GPUs/node talk over PCIe Gen{gpu.pcie_generation} ({pcie:g} GB/s/dir)",
        )
    return link.bandwidth_GBps_per_direction, f"intra-node: {link.describe()} (catalog)"


def default_cpu_ram_per_node(gpu: GpuSpec, gpus_per_node: int) -> tuple[int, str]:
    """Host RAM per node when --cpu-ram-gb gives none, and the assumption line that says where it comes from."""
    if gpu.kind == "cpu":  # the pseudo-device's memory is the host's RAM: the catalog's, measured where it was built
        return gpu.memory_bytes, (
            f"host RAM: {gpu.memory_bytes / GIB:.3g} GiB, the cpu catalog entry's (this project's build machine, "
            "measured); `hardware-selector detect` shows this machine's and --cpu-ram-gb sets it"
        )
    if gpu.segment in ("consumer", "workstation"):
        per_gpu, why = CONSUMER_HOST_RAM_PER_GPU_BYTES, CONSUMER_HOST_RAM_WHY
    else:
        per_gpu, why = DEFAULT_HOST_RAM_PER_GPU_BYTES[gpu.form_factor], HOST_RAM_WHY[gpu.form_factor]
    total = per_gpu * gpus_per_node
    return total, f"host RAM: {total / GIB:g} GiB per node, assumed: {why}; --cpu-ram-gb sets your nodes'"


def _ranks_share_host_ram(spec: GpuSpec, host_ram: int, ranks: int, assumptions: list[str]) -> GpuSpec:
    """The cpu pseudo-device's "GPU memory" is the host's RAM, which the node's ranks share: each gets its part
    (two ranks of a 23.5 GiB host were each planned 23.5 GiB, so a plan "fit" that needed 38 GiB)."""
    per_rank = host_ram // ranks
    assumptions.append(
        f"{spec.name}: {host_ram / GIB:.3g} GiB of host RAM shared by {ranks} rank(s) per node, "
        f"{per_rank / GIB:.3g} GiB each (--cpu-ram-gb sets the host's RAM)"
    )
    return spec.model_copy(update={"memory_bytes": per_rank})


def make_cluster(
    gpu: str | GpuSpec,
    gpus_per_node: int = 8,
    nodes: int = 1,
    interconnect: str | None = None,
    intra_bw: float | None = None,
    inter_bw: float | None = None,
    cpu_ram_gb: float | None = None,
    nvme_gb: float | None = None,
    price_per_hour: float | None = None,
    nvme_gbps: float | None = None,
) -> ClusterSpec:
    """Build a ClusterSpec from user choices, filling the rest from the catalog and presets.

    intra_bw / inter_bw: GB/s per GPU per direction. cpu_ram_gb / nvme_gb: GiB
    (2**30 bytes) per node, like every memory size in this project. nvme_gbps: the
    NVMe's read/write GB/s per node (needs nvme_gb).
    price_per_hour: USD per GPU-hour, replacing the catalog's assumption.
    """
    spec = gpu if isinstance(gpu, GpuSpec) else resolve_gpu(check_name("gpu", gpu))
    gpus_per_node = check_count("gpus per node (--gpus-per-node)", gpus_per_node, high=MAX_GPUS_PER_NODE)
    nodes = check_count("number of nodes (--nodes)", nodes, high=MAX_GPUS)
    if gpus_per_node * nodes > MAX_GPUS:
        raise UserInputError(
            f"{gpus_per_node} x {nodes} GPUs is more than {MAX_GPUS:,}; check --nodes and --gpus-per-node"
        )
    for flag, value, high, zero_allowed in (
        ("--price (USD per GPU-hour)", price_per_hour, MAX_PRICE_PER_HOUR, True),
        ("--cpu-ram-gb (CPU RAM per node)", cpu_ram_gb, MAX_GIB, False),
        ("intra-node bandwidth (GB/s)", intra_bw, MAX_BANDWIDTH_GBPS, False),
        ("inter-node bandwidth (GB/s)", inter_bw, MAX_BANDWIDTH_GBPS, False),
    ):
        if value is not None:
            check_number(flag, value, high=high, low_inclusive=zero_allowed)
    assumptions: list[str] = []
    if price_per_hour is not None:
        spec = spec.with_price(price_per_hour)
    else:
        if nodes > 1 and spec is find_gpu(spec.name):
            # a catalog-priced GPU: price the cluster as what it is rented as (planner/hardware/gpus.py, _priced)
            spec = multi_node_priced(spec.name)
        overrides = "; --price overrides it" if spec.price_usd_per_hour is not None else ""
        assumptions.append(f"price: {spec.price_note()}{overrides}")
    if spec.placeholder:
        assumptions.append(f"{spec.name}: placeholder figures, calibrate before trusting them")

    preset = choose_preset(spec, nodes, interconnect, assumptions)

    if intra_bw is not None:
        if intra_bw <= 0:
            raise UserInputError(f"intra-node bandwidth must be > 0 GB/s, got {intra_bw}")
        intra_GBps = float(intra_bw)
        assumptions.append(f"intra-node: {intra_GBps:g} GB/s/dir (user)")
    else:
        intra_GBps, why = default_intra_node_bandwidth(spec, gpus_per_node)
        assumptions.append(why)

    if inter_bw is not None:
        if inter_bw <= 0:
            raise UserInputError(f"inter-node bandwidth must be > 0 GB/s, got {inter_bw}")
        inter_GBps = float(inter_bw)
        assumptions.append(f"inter-node: {inter_GBps:g} GB/s/dir per GPU (user)")
    else:
        inter_GBps = preset.GBps_per_gpu(gpus_per_node)

    if cpu_ram_gb is not None:
        if cpu_ram_gb <= 0:
            raise UserInputError(f"CPU RAM per node must be > 0 GiB, got {cpu_ram_gb}")
        cpu_ram = int(cpu_ram_gb * GIB)
    else:
        cpu_ram, why = default_cpu_ram_per_node(spec, gpus_per_node)
        assumptions.append(why)

    nvme = check_nvme(nvme_gb, nvme_gbps, ("--nvme-gb", "--nvme-gbps"))
    if nvme:
        assumptions.append(f"NVMe: {nvme_gb:g} GiB per node (user); {nvme_bandwidth(nvme_gbps)[1]}")

    if spec.kind == "cpu" and (gpus_per_node > 1 or cpu_ram_gb is not None):
        spec = _ranks_share_host_ram(spec, cpu_ram, gpus_per_node, assumptions)

    return ClusterSpec(
        gpu=spec,
        gpus_per_node=gpus_per_node,
        num_nodes=nodes,
        inter_node_preset=preset.name,
        intra_node_bandwidth_GBps=intra_GBps,
        inter_node_bandwidth_GBps=inter_GBps,
        intra_node_latency_us=INTRA_NODE_LATENCY_US[spec.interconnect.kind],
        inter_node_latency_us=preset.latency_us,
        cpu_ram_per_node_bytes=cpu_ram,
        cpu_ram_stated=cpu_ram_gb is not None,
        nvme_per_node_bytes=nvme,
        nvme_GBps_per_node=nvme_gbps if nvme else None,
        assumptions=assumptions,
    )


def check_nvme(nvme_gb: float | None, nvme_gbps: float | None, names: tuple[str, str]) -> int | None:
    """NVMe bytes per node from its size in GiB, with its bandwidth checked beside it; `names` are what the door
    calls the two (flags or keyword arguments). A bandwidth without a drive to apply to is an error."""
    size_name, speed_name = names
    if nvme_gb is not None:
        check_number(f"{size_name} (NVMe per node, GiB)", nvme_gb, high=MAX_GIB)
    if nvme_gbps is not None:
        check_number(f"{speed_name} (NVMe GB/s per node)", nvme_gbps, high=MAX_BANDWIDTH_GBPS, low_inclusive=False)
        if not nvme_gb:
            raise UserInputError(
                f"{speed_name} is the bandwidth of the NVMe that {size_name} gives; add {size_name} (its GiB per node)"
            )
    return None if nvme_gb is None else int(nvme_gb * GIB)


def nvme_bandwidth(nvme_gbps: float | None) -> tuple[float, str]:
    """The NVMe read/write GB/s per node the user gave, or the assumed default; and which it is."""
    if nvme_gbps is not None:
        return nvme_gbps, f"NVMe {nvme_gbps:g} GB/s per node (user, --nvme-gbps)"
    return DEFAULT_NVME_GBPS_PER_NODE, (
        f"NVMe {DEFAULT_NVME_GBPS_PER_NODE:g} GB/s per node, an assumed default (planner/hardware/cluster.py), "
        "not measured: pass --nvme-gbps (nvme_gbps=)"
    )
