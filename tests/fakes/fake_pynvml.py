"""A stand-in for the `pynvml` module (from nvidia-ml-py), describing machines this CI box does not have.

Only what planner/hardware/detect.py calls is implemented, under pynvml's real names,
constants and exception classes, with NVML's behaviour where it matters:
- NVLink queries on a GPU without NVLink raise NVMLError_NotSupported;
- a link number past the GPU's last link raises NVMLError_InvalidArgument;
- on NVSwitch baseboards every link's remote PCI info is a switch, never a GPU;
- PCI structs carry bytes (ctypes char arrays), names and versions are str.

Use: `install(monkeypatch, dgx_a100())` puts the fake in sys.modules["pynvml"].
Bus ids and PCI device ids are illustrative, in the format NVML uses.
"""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass, field

# Constants with the values pynvml defines.
NVML_FEATURE_DISABLED = 0
NVML_FEATURE_ENABLED = 1
NVML_NVLINK_MAX_LINKS = 36
NVML_NVLINK_DEVICE_TYPE_GPU = 0x00
NVML_NVLINK_DEVICE_TYPE_IBMNPU = 0x01
NVML_NVLINK_DEVICE_TYPE_SWITCH = 0x02
NVML_NVLINK_DEVICE_TYPE_UNKNOWN = 0xFF

NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_UNKNOWN = 999

_ERROR_STRINGS = {
    NVML_ERROR_UNINITIALIZED: "Uninitialized",
    NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
    NVML_ERROR_NOT_SUPPORTED: "Not Supported",
    NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
    NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
    NVML_ERROR_FUNCTION_NOT_FOUND: "Function Not Found",
    NVML_ERROR_UNKNOWN: "Unknown Error",
}


class NVMLError(Exception):
    """Like pynvml's: NVMLError(code) builds the subclass for that code, which carries .value."""

    _valClassMapping: dict[int, type] = {}

    def __new__(cls, value):
        if cls is NVMLError:
            cls = NVMLError._valClassMapping.get(value, cls)
        error = Exception.__new__(cls)
        error.value = value
        return error

    def __str__(self):
        return _ERROR_STRINGS.get(self.value, f"NVML Error with code {self.value}")

    def __eq__(self, other):
        return isinstance(other, NVMLError) and self.value == other.value

    __hash__ = Exception.__hash__


def _error_class(name: str, code: int) -> type:
    def __new__(cls, *args):
        return NVMLError.__new__(cls, code)

    error_class = type(name, (NVMLError,), {"__new__": __new__})
    NVMLError._valClassMapping[code] = error_class
    return error_class


NVMLError_Uninitialized = _error_class("NVMLError_Uninitialized", NVML_ERROR_UNINITIALIZED)
NVMLError_InvalidArgument = _error_class("NVMLError_InvalidArgument", NVML_ERROR_INVALID_ARGUMENT)
NVMLError_NotSupported = _error_class("NVMLError_NotSupported", NVML_ERROR_NOT_SUPPORTED)
NVMLError_DriverNotLoaded = _error_class("NVMLError_DriverNotLoaded", NVML_ERROR_DRIVER_NOT_LOADED)
NVMLError_LibraryNotFound = _error_class("NVMLError_LibraryNotFound", NVML_ERROR_LIBRARY_NOT_FOUND)
NVMLError_FunctionNotFound = _error_class("NVMLError_FunctionNotFound", NVML_ERROR_FUNCTION_NOT_FOUND)
NVMLError_Unknown = _error_class("NVMLError_Unknown", NVML_ERROR_UNKNOWN)
ERROR_CLASSES = (
    NVMLError_Uninitialized,
    NVMLError_InvalidArgument,
    NVMLError_NotSupported,
    NVMLError_DriverNotLoaded,
    NVMLError_LibraryNotFound,
    NVMLError_FunctionNotFound,
    NVMLError_Unknown,
)

MIB = 2**20
PCI_DEVICE_ID_A100_SXM4_80GB = 0x20B210DE  # device id << 16 | NVIDIA vendor id 0x10DE
PCI_DEVICE_ID_NVSWITCH_GEN2 = 0x1AF110DE
PCI_DEVICE_ID_RTX_4090 = 0x268410DE
PCI_DEVICE_ID_V100_SXM2_32GB = 0x1DB510DE


@dataclass(frozen=True)
class PciAddress:
    domain: int
    bus: int
    device: int = 0
    pci_device_id: int = 0

    def bus_id(self) -> str:
        return f"{self.domain:08X}:{self.bus:02X}:{self.device:02X}.0"  # NVML_DEVICE_PCI_BUS_ID_FMT


@dataclass
class NvLink:
    remote: PciAddress
    remote_type: int  # NVML_NVLINK_DEVICE_TYPE_*
    active: bool = True


@dataclass
class FakeGpu:
    name: str
    memory_total: int
    compute_capability: tuple[int, int]
    pci: PciAddress
    pcie_current: tuple[int, int]  # (generation, width)
    pcie_max: tuple[int, int]
    nvlinks: list[NvLink] | None  # None: the GPU has no NVLink at all
    memory_used: int = 0  # what nvmlDeviceGetMemoryInfo reports in use
    utilization: int = 0  # nvmlDeviceGetUtilizationRates().gpu, percent


@dataclass
class FakeMachine:
    gpus: list[FakeGpu] = field(default_factory=list)
    driver_version: str = "535.129.03"
    cuda_driver_version: int = 12020
    init_error: int | None = None  # an NVML_ERROR_* code nvmlInit raises
    remote_device_type_supported: bool = True  # False: a driver older than nvmlDeviceGetNvLinkRemoteDeviceType


class _PciInfo:
    """Shaped like pynvml.nvmlPciInfo_t: char-array fields come back as bytes."""

    def __init__(self, address: PciAddress):
        self.busId = address.bus_id().encode()
        self.busIdLegacy = address.bus_id()[4:].encode()  # NVML_DEVICE_PCI_BUS_ID_LEGACY_FMT
        self.domain = address.domain
        self.bus = address.bus
        self.device = address.device
        self.pciDeviceId = address.pci_device_id
        self.pciSubSystemId = 0


class _Memory:
    def __init__(self, total: int, used: int = 0):
        self.total, self.free, self.used = total, total - used, used


class _Utilization:
    """Shaped like pynvml.c_nvmlUtilization_t."""

    def __init__(self, gpu: int):
        self.gpu, self.memory = gpu, 0


class _Handle:
    def __init__(self, index: int):
        self.index = index


class FakeNvml:
    """The NVML calls detect.py makes, answered from a FakeMachine."""

    def __init__(self, machine: FakeMachine):
        self.machine = machine
        self.initialized = False
        self.calls: list[str] = []

    def _gpu(self, handle: _Handle) -> FakeGpu:
        if not self.initialized:
            raise NVMLError(NVML_ERROR_UNINITIALIZED)
        return self.machine.gpus[handle.index]

    def _link(self, handle: _Handle, link: int) -> NvLink:
        gpu = self._gpu(handle)
        if gpu.nvlinks is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        if not 0 <= link < len(gpu.nvlinks):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return gpu.nvlinks[link]

    def nvmlInit(self):
        self.calls.append("nvmlInit")
        if self.machine.init_error is not None:
            raise NVMLError(self.machine.init_error)
        self.initialized = True

    def nvmlShutdown(self):
        self.calls.append("nvmlShutdown")
        if not self.initialized:
            raise NVMLError(NVML_ERROR_UNINITIALIZED)
        self.initialized = False

    def nvmlSystemGetDriverVersion(self):
        return self.machine.driver_version

    def nvmlSystemGetCudaDriverVersion(self):
        return self.machine.cuda_driver_version

    def nvmlDeviceGetCount(self):
        if not self.initialized:
            raise NVMLError(NVML_ERROR_UNINITIALIZED)
        return len(self.machine.gpus)

    def nvmlDeviceGetHandleByIndex(self, index):
        if not 0 <= index < self.nvmlDeviceGetCount():
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return _Handle(index)

    def nvmlDeviceGetName(self, handle):
        return self._gpu(handle).name

    def nvmlDeviceGetMemoryInfo(self, handle, version=None):
        gpu = self._gpu(handle)
        return _Memory(gpu.memory_total, gpu.memory_used)

    def nvmlDeviceGetUtilizationRates(self, handle):
        return _Utilization(self._gpu(handle).utilization)

    def nvmlDeviceGetCudaComputeCapability(self, handle):
        return self._gpu(handle).compute_capability

    def nvmlDeviceGetPciInfo(self, handle):
        return _PciInfo(self._gpu(handle).pci)

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle):
        return self._gpu(handle).pcie_current[0]

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle):
        return self._gpu(handle).pcie_max[0]

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle):
        return self._gpu(handle).pcie_current[1]

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle):
        return self._gpu(handle).pcie_max[1]

    def nvmlDeviceGetNvLinkState(self, handle, link):
        return NVML_FEATURE_ENABLED if self._link(handle, link).active else NVML_FEATURE_DISABLED

    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle, link):
        return _PciInfo(self._link(handle, link).remote)

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle, link):
        if not self.machine.remote_device_type_supported:
            raise NVMLError(NVML_ERROR_FUNCTION_NOT_FOUND)
        return self._link(handle, link).remote_type


CONSTANT_NAMES = (
    "NVML_FEATURE_DISABLED",
    "NVML_FEATURE_ENABLED",
    "NVML_NVLINK_MAX_LINKS",
    "NVML_NVLINK_DEVICE_TYPE_GPU",
    "NVML_NVLINK_DEVICE_TYPE_IBMNPU",
    "NVML_NVLINK_DEVICE_TYPE_SWITCH",
    "NVML_NVLINK_DEVICE_TYPE_UNKNOWN",
)


def build_module(machine: FakeMachine) -> types.ModuleType:
    """A module object that imports and behaves like pynvml for this machine."""
    module = types.ModuleType("pynvml")
    fake = FakeNvml(machine)
    module.fake = fake  # lets tests look at the calls made
    for name in dir(FakeNvml):
        if name.startswith("nvml"):
            setattr(module, name, getattr(fake, name))
    for name in CONSTANT_NAMES:
        setattr(module, name, globals()[name])
    module.NVMLError = NVMLError
    for error_class in ERROR_CLASSES:
        setattr(module, error_class.__name__, error_class)
    return module


def install(monkeypatch, machine: FakeMachine) -> types.ModuleType:
    module = build_module(machine)
    monkeypatch.setitem(sys.modules, "pynvml", module)
    return module


# ---- the machines -------------------------------------------------------------------------

DGX_A100_GPU_BUSES = (0x07, 0x0F, 0x47, 0x4E, 0x87, 0x90, 0xB7, 0xBD)
DGX_A100_NVSWITCH_BUSES = (0xC4, 0xC5, 0xC6, 0xC7, 0xC8, 0xC9)


def dgx_a100(remote_device_type_supported: bool = True) -> FakeMachine:
    """8 x A100-SXM4-80GB on an HGX board: 12 NVLink 3 links each, 2 to each of 6 NVSwitches."""
    switches = [PciAddress(0, bus, 0, PCI_DEVICE_ID_NVSWITCH_GEN2) for bus in DGX_A100_NVSWITCH_BUSES]
    gpus = [
        FakeGpu(
            name="NVIDIA A100-SXM4-80GB",
            memory_total=81920 * MIB,
            compute_capability=(8, 0),
            pci=PciAddress(0, bus, 0, PCI_DEVICE_ID_A100_SXM4_80GB),
            pcie_current=(4, 16),
            pcie_max=(4, 16),
            nvlinks=[NvLink(switches[link // 2], NVML_NVLINK_DEVICE_TYPE_SWITCH) for link in range(12)],
        )
        for bus in DGX_A100_GPU_BUSES
    ]
    return FakeMachine(gpus=gpus, remote_device_type_supported=remote_device_type_supported)


def two_rtx_4090() -> FakeMachine:
    """A workstation with 2 x RTX 4090 on PCIe Gen4 x16; idle cards report a lower current generation."""
    gpus = [
        FakeGpu(
            name="NVIDIA GeForce RTX 4090",
            memory_total=24564 * MIB,
            compute_capability=(8, 9),
            pci=PciAddress(0, bus, 0, PCI_DEVICE_ID_RTX_4090),
            pcie_current=(1, 16),
            pcie_max=(4, 16),
            nvlinks=None,
        )
        for bus in (0x01, 0x21)
    ]
    return FakeMachine(gpus=gpus, driver_version="550.54.14", cuda_driver_version=12040)


# DGX-1 (V100) hybrid cube-mesh: two fully connected quads, joined GPU i <-> i+4.
# Links per pair, 6 per GPU in total.
DGX1_QUAD_LINKS = {(0, 1): 1, (0, 2): 1, (0, 3): 2, (1, 2): 2, (1, 3): 1, (2, 3): 1}
DGX1_CROSS_LINKS = 2


def dgx1_v100() -> FakeMachine:
    """8 x V100-SXM2-32GB linked GPU to GPU (no NVSwitch): each GPU reaches 4 others, not all 7."""
    addresses = [PciAddress(0, 0x06 + 0x10 * i, 0, PCI_DEVICE_ID_V100_SXM2_32GB) for i in range(8)]
    pair_links: dict[tuple[int, int], int] = {}
    for (a, b), count in DGX1_QUAD_LINKS.items():
        pair_links[(a, b)] = count
        pair_links[(a + 4, b + 4)] = count
    for a in range(4):
        pair_links[(a, a + 4)] = DGX1_CROSS_LINKS
    gpus = []
    for index, address in enumerate(addresses):
        links = []
        for (a, b), count in sorted(pair_links.items()):
            if index in (a, b):
                peer = addresses[b if index == a else a]
                links += [NvLink(peer, NVML_NVLINK_DEVICE_TYPE_GPU) for _ in range(count)]
        gpus.append(
            FakeGpu(
                name="Tesla V100-SXM2-32GB",
                memory_total=32510 * MIB,
                compute_capability=(7, 0),
                pci=address,
                pcie_current=(3, 16),
                pcie_max=(3, 16),
                nvlinks=links,
            )
        )
    return FakeMachine(gpus=gpus, driver_version="470.223.02", cuda_driver_version=11040)


def nvml_init_error(code: int = NVML_ERROR_LIBRARY_NOT_FOUND) -> FakeMachine:
    """A machine where nvmlInit fails: no libnvidia-ml (CPU box) or the driver is not loaded."""
    return FakeMachine(init_error=code)
