"""What this machine has: GPUs and their links through NVML, host RAM, and the launcher's environment
(read by launch_context.py).

Detection never raises: without the pynvml module, or when nvmlInit fails (no
driver, no GPU, a CPU-only container), the report says CPU-only and why.

NVLink topology: for every active link NVML tells which PCI device sits at the
other end. On boards where GPUs link straight to each other (DGX-1) that is a
GPU of this node. On NVSwitch baseboards (HGX/DGX A100, H100) every link ends
at a switch instead, so GPU pairs never appear directly; two GPUs attached to
the same switches reach each other at full NVLink rate, which is how this
module infers "all-to-all via NVSwitch".
"""

from __future__ import annotations

import os
import socket
from collections import Counter
from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, Field, computed_field

from planner.errors import UserInputError
from planner.hardware.cluster import GIB, ClusterSpec, make_cluster
from planner.hardware.gpus import PCIE_X16_GBPS_PER_DIRECTION, find_gpu, pcie_bandwidth_GBps_per_direction, suggest_gpus
from planner.hardware.launch_context import LaunchContext, read_launch_context
from planner.hardware.mig import refuse_mig_slices

NVIDIA_PCI_VENDOR_ID = 0x10DE
# NVML's nvmlNvLinkDeviceType values (pynvml NVML_NVLINK_DEVICE_TYPE_*).
_NVLINK_DEVICE_TYPE_GPU = 0x00
_NVLINK_DEVICE_TYPE_SWITCH = 0x02


class PcieLink(BaseModel):
    """Current and maximum PCIe link; GPUs drop to a lower generation when idle, so max is what counts."""

    current_generation: int | None = None
    max_generation: int | None = None
    current_width: int | None = None
    max_width: int | None = None


class DetectedGpu(BaseModel):
    index: int
    name: str  # as NVML reports it, e.g. "NVIDIA A100-SXM4-80GB"
    memory_total_bytes: int
    compute_capability: str | None = None
    pci_bus_id: str
    pcie: PcieLink
    catalog_name: str | None = None  # None: not in planner/catalog/gpus.json
    active_nvlinks: int = 0


class NvLinkPair(BaseModel):
    gpu_a: int
    gpu_b: int
    links: int
    via: Literal["direct", "nvswitch"]


class NvLinkTopology(BaseModel):
    pairs: list[NvLinkPair] = Field(default_factory=list)
    nvswitches: int = 0  # distinct switch endpoints seen on the links
    all_to_all: bool = False  # every pair of detected GPUs shares NVLink
    # Every GPU reaches every other over NVLink, possibly through other GPUs (DGX-1's
    # cube-mesh): NCCL rings can then run on NVLink even though not all pairs are linked.
    connected: bool = False
    summary: str = "no NVLink between GPUs"
    notes: list[str] = Field(default_factory=list)


class HostInfo(BaseModel):
    hostname: str
    ram_total_bytes: int | None = None
    ram_available_bytes: int | None = None
    cpu_logical_cores: int | None = None
    cpu_physical_cores: int | None = None


class DetectionReport(BaseModel):
    nvml_available: bool
    nvml_error: str | None = None
    driver_version: str | None = None
    cuda_driver_version: str | None = None  # highest CUDA version the driver supports, "12.4"
    gpus: list[DetectedGpu] = Field(default_factory=list)
    nvlink: NvLinkTopology = Field(default_factory=NvLinkTopology)
    host: HostInfo
    launch: LaunchContext

    @computed_field  # type: ignore[prop-decorator]
    @property
    def cpu_only(self) -> bool:
        return not self.gpus

    def to_cluster_spec(
        self,
        interconnect: str | None = None,
        price_per_hour: float | None = None,
        nvme_gb: float | None = None,
        nvme_gbps: float | None = None,
        gpus_per_node: int | None = None,
        nodes: int | None = None,
        cpu_ram_gb: float | None = None,
    ) -> ClusterSpec | None:
        """The cluster this machine (and its launcher's node count) amounts to, with the NVMe the user names
        (detection does not look for it); None without GPUs. What the user states wins over what was detected
        (a new user's audit: --nodes, --gpus-per-node and --cpu-ram-gb were dropped, and the "fewest that fits"
        advice named them): `gpus_per_node` of this node's GPUs (no more than it has), `nodes` of such nodes,
        `cpu_ram_gb` of host RAM per node.

        Raises UserInputError when the GPUs are mixed or not in the catalog, since
        the planner then needs the user to name the target GPU.
        """
        if not self.gpus:
            return None
        refuse_mig_slices([gpu.name for gpu in self.gpus])
        unknown = [gpu.name for gpu in self.gpus if gpu.catalog_name is None]
        if unknown:
            hint = ", ".join(f"'{name}'" for name in suggest_gpus(unknown[0])) or "see `hardware-selector gpus`"
            raise UserInputError(
                f"detected GPU '{unknown[0]}' is not in the GPU catalog; name the closest with --gpu ({hint})"
            )
        names = sorted({gpu.catalog_name for gpu in self.gpus if gpu.catalog_name})
        if len(names) > 1:
            raise UserInputError(f"this node mixes GPU models ({', '.join(names)}); plan for one of them with --gpu")
        spec = find_gpu(names[0])
        assert spec is not None  # catalog_name came from the catalog
        if gpus_per_node is not None and gpus_per_node > len(self.gpus):
            raise UserInputError(
                f"--gpus-per-node {gpus_per_node}: this node has {len(self.gpus)} x {names[0]}; pass "
                f"{len(self.gpus)} or fewer, or name the target with --gpu {names[0]}"
            )
        notes = [f"detected {len(self.gpus)} x {self.gpus[0].name} on {self.host.hostname}"]
        intra_bw = self._measured_intra_bandwidth(spec.interconnect.kind, notes)
        detected_ram = self.host.ram_total_bytes / GIB if self.host.ram_total_bytes else None
        cluster = make_cluster(
            spec,
            gpus_per_node=gpus_per_node or len(self.gpus),
            nodes=nodes or self.launch.num_nodes or 1,
            interconnect=interconnect,
            intra_bw=intra_bw,
            cpu_ram_gb=cpu_ram_gb if cpu_ram_gb is not None else detected_ram,
            price_per_hour=price_per_hour,
            nvme_gb=nvme_gb,
            nvme_gbps=nvme_gbps,
        )
        return cluster.model_copy(update={"assumptions": notes + cluster.assumptions})

    def _measured_intra_bandwidth(self, catalog_link_kind: str, notes: list[str]) -> float | None:
        """Replace the catalog's link figure when detection shows something slower; None keeps it."""
        if len(self.gpus) < 2:
            return None
        if catalog_link_kind == "nvlink" and self.nvlink.connected:
            if not self.nvlink.all_to_all:
                notes.append(f"{self.nvlink.summary}: rings use NVLink, all-to-all traffic is slower")
            return None
        if catalog_link_kind != "nvlink" and self.nvlink.pairs:
            notes.append(
                f"{self.nvlink.summary} (a bridge?); bandwidth kept at the PCIe figure, pass intra_bw to change it"
            )
        generations = [gpu.pcie.max_generation for gpu in self.gpus if gpu.pcie.max_generation is not None]
        widths = [gpu.pcie.max_width for gpu in self.gpus if gpu.pcie.max_width is not None]
        if (
            len(generations) < len(self.gpus)
            or len(widths) < len(self.gpus)
            or min(generations) not in PCIE_X16_GBPS_PER_DIRECTION
        ):
            return None  # unknown link: keep the catalog figure
        bandwidth = pcie_bandwidth_GBps_per_direction(min(generations), min(widths))
        if catalog_link_kind == "nvlink":
            notes.append(f"NVLink does not join all GPUs ({self.nvlink.summary}); intra-node traffic assumed on PCIe")
        notes.append(f"intra-node: PCIe Gen{min(generations)} x{min(widths)} detected ({bandwidth:g} GB/s/dir)")
        return bandwidth


def detect_hardware(environ: Mapping[str, str] | None = None) -> DetectionReport:
    """Everything detect reports; `environ` defaults to os.environ (tests pass their own)."""
    environ = os.environ if environ is None else environ
    report = _detect_nvml()
    report.update(host=detect_host(), launch=read_launch_context(environ))
    return DetectionReport(**report)


def _detect_nvml() -> dict:
    try:
        import pynvml
    except ImportError:
        return {"nvml_available": False, "nvml_error": "the pynvml module is missing (pip install nvidia-ml-py)"}
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as error:
        return {"nvml_available": False, "nvml_error": f"nvmlInit failed: {error}"}
    try:
        return _query_devices(pynvml)
    except pynvml.NVMLError as error:
        return {"nvml_available": False, "nvml_error": f"NVML query failed: {error}"}
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass


def _query_devices(pynvml) -> dict:
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
    bus_keys = [_pci_key(pynvml.nvmlDeviceGetPciInfo(handle)) for handle in handles]
    gpus = [_describe_gpu(pynvml, index, handle) for index, handle in enumerate(handles)]
    endpoints, notes = _scan_nvlinks(pynvml, handles, bus_keys)
    for gpu, gpu_endpoints in zip(gpus, endpoints):
        gpu.active_nvlinks = len(gpu_endpoints)
    topology = _topology(endpoints)
    topology.notes = notes + topology.notes
    return {
        "nvml_available": True,
        "driver_version": _optional(pynvml, lambda: _text(pynvml.nvmlSystemGetDriverVersion())),
        "cuda_driver_version": _optional(pynvml, lambda: _cuda_version(pynvml.nvmlSystemGetCudaDriverVersion())),
        "gpus": gpus,
        "nvlink": topology,
    }


def _describe_gpu(pynvml, index: int, handle) -> DetectedGpu:
    name = _text(pynvml.nvmlDeviceGetName(handle))
    capability = _optional(pynvml, lambda: pynvml.nvmlDeviceGetCudaComputeCapability(handle))
    catalog_entry = find_gpu(name)
    return DetectedGpu(
        index=index,
        name=name,
        memory_total_bytes=int(pynvml.nvmlDeviceGetMemoryInfo(handle).total),
        compute_capability=f"{capability[0]}.{capability[1]}" if capability else None,
        pci_bus_id=_text(pynvml.nvmlDeviceGetPciInfo(handle).busId),
        pcie=PcieLink(
            current_generation=_optional(pynvml, lambda: pynvml.nvmlDeviceGetCurrPcieLinkGeneration(handle)),
            max_generation=_optional(pynvml, lambda: pynvml.nvmlDeviceGetMaxPcieLinkGeneration(handle)),
            current_width=_optional(pynvml, lambda: pynvml.nvmlDeviceGetCurrPcieLinkWidth(handle)),
            max_width=_optional(pynvml, lambda: pynvml.nvmlDeviceGetMaxPcieLinkWidth(handle)),
        ),
        catalog_name=catalog_entry.name if catalog_entry else None,
    )


# An NVLink endpoint: ("gpu", index), ("nvswitch", pci key) or ("other", pci key).
Endpoint = tuple[str, object]


def _scan_nvlinks(pynvml, handles: list, bus_keys: list[tuple]) -> tuple[list[list[Endpoint]], list[str]]:
    """For each GPU, where each of its active NVLinks ends."""
    endpoints: list[list[Endpoint]] = []
    notes: list[str] = []
    for index, handle in enumerate(handles):
        found: list[Endpoint] = []
        for link in range(pynvml.NVML_NVLINK_MAX_LINKS):
            try:
                if pynvml.nvmlDeviceGetNvLinkState(handle, link) != pynvml.NVML_FEATURE_ENABLED:
                    continue
            except (pynvml.NVMLError_NotSupported, pynvml.NVMLError_InvalidArgument):
                continue  # no NVLink on this GPU, or a link number past the GPU's last link
            except pynvml.NVMLError as error:
                notes.append(f"GPU {index} link {link}: state query failed ({error})")
                continue
            found.append(_link_endpoint(pynvml, handle, link, bus_keys, index, notes))
        endpoints.append(found)
    return endpoints, notes


def _link_endpoint(pynvml, handle, link: int, bus_keys: list[tuple], index: int, notes: list[str]) -> Endpoint:
    try:
        # The Python wrapper calls the C nvmlDeviceGetNvLinkRemotePciInfo_v2.
        remote = pynvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link)
    except pynvml.NVMLError as error:
        notes.append(f"GPU {index} link {link}: remote PCI info unavailable ({error})")
        return ("other", ("unknown", index, link))
    key = _pci_key(remote)
    if key in bus_keys:
        return ("gpu", bus_keys.index(key))
    device_type = None
    if hasattr(pynvml, "nvmlDeviceGetNvLinkRemoteDeviceType"):  # absent from older pynvml releases
        device_type = _optional(pynvml, lambda: pynvml.nvmlDeviceGetNvLinkRemoteDeviceType(handle, link))
    if device_type == _NVLINK_DEVICE_TYPE_SWITCH:
        return ("nvswitch", key)
    # Older drivers lack the device-type query: an NVIDIA device that is not one of
    # this node's GPUs, at the far end of an NVLink, is an NVSwitch.
    if device_type is None and (int(remote.pciDeviceId) & 0xFFFF) == NVIDIA_PCI_VENDOR_ID:
        return ("nvswitch", key)
    return ("other", key)


def _topology(endpoints: list[list[Endpoint]]) -> NvLinkTopology:
    """Turn per-link endpoints into GPU pairs: direct links, and links through shared switches."""
    direct = [Counter(target for kind, target in ends if kind == "gpu") for ends in endpoints]
    via_switch = [Counter(target for kind, target in ends if kind == "nvswitch") for ends in endpoints]
    pairs: list[NvLinkPair] = []
    count = len(endpoints)
    for a in range(count):
        for b in range(a + 1, count):
            # Both sides should report the same links; take the larger in case one side's query failed.
            links = max(direct[a][b], direct[b][a])
            if links:
                pairs.append(NvLinkPair(gpu_a=a, gpu_b=b, links=links, via="direct"))
                continue
            # Through a switch, a pair can use as many links as both have on each shared switch.
            shared = sum(min(via_switch[a][s], via_switch[b][s]) for s in via_switch[a].keys() & via_switch[b].keys())
            if shared:
                pairs.append(NvLinkPair(gpu_a=a, gpu_b=b, links=shared, via="nvswitch"))
    connected = count >= 2 and _all_joined(count, pairs)
    switches = set().union(*via_switch) if via_switch else set()
    other = sum(1 for ends in endpoints for kind, _ in ends if kind == "other")
    total_pairs = count * (count - 1) // 2
    all_to_all = count >= 2 and len(pairs) == total_pairs
    notes = [f"{other} active link(s) end at a device that is neither a local GPU nor an NVSwitch"] if other else []
    return NvLinkTopology(
        pairs=pairs,
        nvswitches=len(switches),
        all_to_all=all_to_all,
        connected=connected,
        summary=_summary(pairs, all_to_all, total_pairs, [len(ends) for ends in endpoints]),
        notes=notes,
    )


def _all_joined(count: int, pairs: list[NvLinkPair]) -> bool:
    """True when the NVLink pairs connect all GPUs into one group."""
    reached = {0}
    frontier = [0]
    while frontier:
        gpu = frontier.pop()
        for pair in pairs:
            if gpu in (pair.gpu_a, pair.gpu_b):
                peer = pair.gpu_b if gpu == pair.gpu_a else pair.gpu_a
                if peer not in reached:
                    reached.add(peer)
                    frontier.append(peer)
    return len(reached) == count


def _summary(pairs: list[NvLinkPair], all_to_all: bool, total_pairs: int, links_per_gpu: list[int]) -> str:
    if not pairs:
        return "no NVLink between GPUs"
    via = "via NVSwitch" if all(pair.via == "nvswitch" for pair in pairs) else "direct"
    links = (
        f"{min(links_per_gpu)}-{max(links_per_gpu)}"
        if min(links_per_gpu) != max(links_per_gpu)
        else str(links_per_gpu[0])
    )
    if all_to_all:
        return f"NVLink all-to-all {via} ({links} links per GPU)"
    return f"NVLink joins {len(pairs)} of {total_pairs} GPU pairs ({via})"


def detect_host() -> HostInfo:
    host = HostInfo(hostname=socket.gethostname(), cpu_logical_cores=os.cpu_count())
    try:
        import psutil
    except ImportError:
        return host
    memory = psutil.virtual_memory()
    host.ram_total_bytes = int(memory.total)
    host.ram_available_bytes = int(memory.available)
    host.cpu_physical_cores = psutil.cpu_count(logical=False)
    return host


def _optional(pynvml, query):
    """The query's result, or None when this GPU or driver does not support it."""
    try:
        return query()
    except pynvml.NVMLError:
        return None


def _pci_key(info) -> tuple[int, int, int]:
    # Compare numbers, not bus-id strings: NVML writes both 4- and 8-digit domains.
    return (int(info.domain), int(info.bus), int(info.device))


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _cuda_version(value: int) -> str:
    return f"{value // 1000}.{value % 1000 // 10}"  # 12040 -> "12.4"
