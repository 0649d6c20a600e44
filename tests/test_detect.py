"""Detection through a fake NVML (three machines and a CPU box), launcher variables, and the CLI commands."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hardware_selector_cli.app import main
from planner.errors import UserInputError
from planner.hardware.detect import detect_hardware
from planner.hardware.gpus import resolve_gpu
from planner.hardware.launch_context import SLURM_VARIABLES, TORCHRUN_VARIABLES, read_launch_context
from tests.fakes import fake_pynvml
from tests.fakes.fake_pynvml import (
    NVML_ERROR_DRIVER_NOT_LOADED,
    NVML_ERROR_LIBRARY_NOT_FOUND,
    FakeGpu,
    FakeMachine,
    PciAddress,
    dgx1_v100,
    dgx_a100,
    install,
    nvml_init_error,
    two_rtx_4090,
)

REPO_ROOT = Path(__file__).resolve().parent.parent
GIB = 2**30


@pytest.fixture(autouse=True)
def no_launcher_variables(monkeypatch):
    """Tests may themselves run under SLURM or torchrun; start every test from a clean slate."""
    for name in (*SLURM_VARIABLES, *TORCHRUN_VARIABLES):
        monkeypatch.delenv(name, raising=False)


# ---- the fake mirrors the real pynvml ------------------------------------------------------


def test_fake_uses_real_pynvml_names_and_values():
    real = pytest.importorskip("pynvml")  # importing it does not load libnvidia-ml
    module = fake_pynvml.build_module(FakeMachine())
    for name in dir(module):
        if name.startswith(("nvml", "NVML")):
            assert hasattr(real, name), f"fake pynvml has '{name}', the real module does not"
        if name.startswith("NVML_"):
            assert getattr(module, name) == getattr(real, name), name
    for error_class in fake_pynvml.ERROR_CLASSES:
        fake_error = error_class()
        assert type(real.NVMLError(fake_error.value)).__name__ == error_class.__name__
        assert str(fake_error) == str(real.NVMLError(fake_error.value))


# ---- three machines --------------------------------------------------------------------------


def test_dgx_a100_all_gpus_matched_and_nvlink_all_to_all_via_nvswitch(monkeypatch):
    nvml = install(monkeypatch, dgx_a100())
    report = detect_hardware({})
    assert report.nvml_available and report.nvml_error is None and not report.cpu_only
    assert report.driver_version == "535.129.03" and report.cuda_driver_version == "12.2"
    assert len(report.gpus) == 8
    for gpu in report.gpus:
        assert gpu.catalog_name == "A100-80GB"
        assert gpu.memory_total_bytes == resolve_gpu("A100-80GB").memory_bytes == 80 * GIB
        assert gpu.compute_capability == "8.0"
        assert (gpu.pcie.max_generation, gpu.pcie.max_width) == (4, 16)
        assert gpu.active_nvlinks == 12
    assert report.gpus[0].pci_bus_id == "00000000:07:00.0"
    topology = report.nvlink
    assert topology.all_to_all and topology.connected
    assert topology.nvswitches == 6
    assert len(topology.pairs) == 28
    assert all(pair.via == "nvswitch" and pair.links == 12 for pair in topology.pairs)
    assert topology.summary == "NVLink all-to-all via NVSwitch (12 links per GPU)"
    assert nvml.fake.calls == ["nvmlInit", "nvmlShutdown"]


def test_dgx_a100_on_a_driver_without_the_remote_device_type_query(monkeypatch):
    install(monkeypatch, dgx_a100(remote_device_type_supported=False))
    report = detect_hardware({})
    assert report.nvlink.all_to_all and report.nvlink.nvswitches == 6


def test_dgx_a100_becomes_a_cluster_spec(monkeypatch):
    install(monkeypatch, dgx_a100())
    report = detect_hardware({"SLURM_JOB_NUM_NODES": "4"})
    cluster = report.to_cluster_spec()
    assert cluster.gpu.name == "A100-80GB"
    assert cluster.gpus_per_node == 8 and cluster.num_nodes == 4 and cluster.world_size == 32
    assert cluster.intra_node_bandwidth_GBps == 300
    assert cluster.inter_node_preset == "ib-hdr"
    assert cluster.cpu_ram_per_node_bytes == report.host.ram_total_bytes
    assert cluster.assumptions[0].startswith("detected 8 x NVIDIA A100-SXM4-80GB")
    assert report.to_cluster_spec(interconnect="roce-1600g").inter_node_bandwidth_GBps == 25


def test_two_rtx_4090_on_pcie_gen4_without_nvlink(monkeypatch):
    install(monkeypatch, two_rtx_4090())
    report = detect_hardware({})
    assert [gpu.catalog_name for gpu in report.gpus] == ["RTX-4090", "RTX-4090"]
    for gpu in report.gpus:
        assert (gpu.pcie.max_generation, gpu.pcie.max_width) == (4, 16)
        assert gpu.pcie.current_generation == 1  # idle cards downshift; max is what counts
        assert gpu.active_nvlinks == 0
        assert gpu.compute_capability == "8.9"
    assert report.nvlink.pairs == [] and not report.nvlink.all_to_all and not report.nvlink.connected
    assert report.nvlink.summary == "no NVLink between GPUs"
    cluster = report.to_cluster_spec()
    assert cluster.gpus_per_node == 2 and cluster.intra_node_bandwidth_GBps == 32
    assert cluster.num_nodes == 1 and cluster.inter_node_preset == "none"


def test_dgx1_v100_direct_mesh_is_connected_but_not_all_to_all(monkeypatch):
    install(monkeypatch, dgx1_v100())
    report = detect_hardware({})
    topology = report.nvlink
    assert all(gpu.active_nvlinks == 6 for gpu in report.gpus)
    assert len(topology.pairs) == 16 and all(pair.via == "direct" for pair in topology.pairs)
    links = {(pair.gpu_a, pair.gpu_b): pair.links for pair in topology.pairs}
    assert links[(0, 3)] == 2 and links[(0, 1)] == 1 and links[(0, 4)] == 2 and (0, 5) not in links
    assert topology.connected and not topology.all_to_all
    assert topology.summary == "NVLink joins 16 of 28 GPU pairs (direct)"
    cluster = report.to_cluster_spec()
    assert cluster.gpu.name == "V100-32GB" and cluster.intra_node_bandwidth_GBps == 150
    assert any("rings use NVLink" in note for note in cluster.assumptions)


@pytest.mark.parametrize(
    "code, reason",
    [
        (NVML_ERROR_LIBRARY_NOT_FOUND, "NVML Shared Library Not Found"),
        (NVML_ERROR_DRIVER_NOT_LOADED, "Driver Not Loaded"),
    ],
)
def test_nvml_init_failure_is_a_cpu_only_report(monkeypatch, code, reason):
    nvml = install(monkeypatch, nvml_init_error(code))
    report = detect_hardware({})
    assert not report.nvml_available and report.cpu_only and report.gpus == []
    assert report.nvml_error == f"nvmlInit failed: {reason}"
    assert report.to_cluster_spec() is None
    assert report.host.ram_total_bytes and report.host.ram_total_bytes > 0
    assert nvml.fake.calls == ["nvmlInit"]


def test_missing_pynvml_module_is_a_cpu_only_report(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` raise ImportError
    report = detect_hardware({})
    assert report.cpu_only and "nvidia-ml-py" in report.nvml_error


def _pcie_gpu(name: str, gib: int, capability: tuple[int, int]) -> FakeGpu:
    """One GPU of `name` on PCIe Gen5 x16, without NVLink."""
    return FakeGpu(name=name, memory_total=gib * GIB, compute_capability=capability, pci=PciAddress(0, 0x3B),
                   pcie_current=(5, 16), pcie_max=(5, 16), nvlinks=None)  # fmt: skip


def test_gpu_missing_from_the_catalog_is_reported_and_needs_a_user_choice(monkeypatch):
    install(monkeypatch, FakeMachine(gpus=[_pcie_gpu("NVIDIA Mystery X1", 48, (12, 0))]))
    report = detect_hardware({})
    assert report.gpus[0].catalog_name is None
    with pytest.raises(UserInputError, match="'NVIDIA Mystery X1' is not in the GPU catalog"):
        report.to_cluster_spec()


def test_a_mig_slice_is_named_as_one_not_planned_as_its_whole_gpu(monkeypatch):
    """An audit: a MIG slice ("NVIDIA H100 80GB HBM3 MIG 1g.10gb") was "not in the GPU catalog; name the closest
    with --gpu ('H100-80GB', ...)", which plans 80 GB for a 10 GB slice. It is one line naming the slice, its
    share, and the whole GPU it is cut from."""
    install(monkeypatch, FakeMachine(gpus=[_pcie_gpu("NVIDIA H100 80GB HBM3 MIG 1g.10gb", 10, (9, 0))]))
    with pytest.raises(UserInputError) as refused:
        detect_hardware({}).to_cluster_spec()
    said = str(refused.value)
    assert said.startswith("detected a MIG slice, 'NVIDIA H100 80GB HBM3 MIG 1g.10gb' (1/7 of the GPU's compute, 10")
    assert "plan the whole H100-80GB with --gpu H100-80GB" in said and "not in the GPU catalog" not in said


# ---- launcher variables ----------------------------------------------------------------------


def test_slurm_context():
    context = read_launch_context(
        {
            "SLURM_JOB_NUM_NODES": "4",
            "SLURM_NODEID": "2",
            "SLURM_NTASKS": "32",
            "SLURM_JOB_NODELIST": "gpu[001-004]",
            "SLURM_GPUS_ON_NODE": "8",
        }
    )
    assert context.launcher == "slurm"
    assert (context.num_nodes, context.node_rank, context.slurm_ntasks, context.slurm_gpus_on_node) == (4, 2, 32, 8)
    assert context.slurm_job_nodelist == "gpu[001-004]"
    assert read_launch_context({"SLURM_NNODES": "3"}).num_nodes == 3


def test_torchrun_context_derives_the_node_count():
    context = read_launch_context(
        {
            "WORLD_SIZE": "16",
            "RANK": "9",
            "LOCAL_RANK": "1",
            "LOCAL_WORLD_SIZE": "8",
            "MASTER_ADDR": "10.0.0.1",
            "MASTER_PORT": "29500",
            "GROUP_RANK": "1",
        }
    )
    assert context.launcher == "torchrun"
    assert (context.world_size, context.rank, context.local_rank, context.local_world_size) == (16, 9, 1, 8)
    assert context.num_nodes == 2 and context.node_rank == 1
    assert (context.master_addr, context.master_port) == ("10.0.0.1", 29500)
    assert read_launch_context({"NODE_RANK": "3"}).node_rank == 3


def test_slurm_and_torchrun_together_and_bad_numbers_become_warnings():
    context = read_launch_context({"SLURM_JOB_NUM_NODES": "2", "WORLD_SIZE": "sixteen", "RANK": "0"})
    assert context.launcher == "slurm+torchrun"
    assert context.num_nodes == 2 and context.world_size is None
    assert context.warnings == ["WORLD_SIZE='sixteen' is not an integer; ignored"]


def test_no_launcher():
    context = read_launch_context({"PATH": "/usr/bin"})
    assert context.launcher == "none" and context.num_nodes is None and context.variables == {}


def test_detect_reads_os_environ_by_default(monkeypatch):
    install(monkeypatch, nvml_init_error())
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    report = detect_hardware()
    assert report.launch.launcher == "torchrun" and report.launch.num_nodes == 1


# ---- the CLI ---------------------------------------------------------------------------------


def test_cli_detect_without_gpu_tells_the_user_to_name_one(monkeypatch, capsys):
    install(monkeypatch, nvml_init_error())
    assert main(["detect"]) == 0
    out = capsys.readouterr().out
    assert "No NVIDIA GPU detected (NVML: nvmlInit failed: NVML Shared Library Not Found)" in out
    assert "--gpu H100-80GB" in out and "hardware-selector gpus" in out
    assert "Launcher: none" in out


def test_cli_detect_on_a_dgx_a100(monkeypatch, capsys):
    install(monkeypatch, dgx_a100())
    monkeypatch.setenv("SLURM_JOB_NUM_NODES", "2")
    assert main(["detect"]) == 0
    out = capsys.readouterr().out
    assert "NVIDIA A100-SXM4-80GB" in out and "A100-80GB" in out
    assert "Topology: NVLink all-to-all via NVSwitch (12 links per GPU)" in out
    assert "Launcher: slurm; num_nodes=2" in out
    assert "Planning target: 2 node(s) x 8 A100-80GB" in out


def test_cli_detect_with_an_unknown_gpu_still_exits_0(monkeypatch, capsys):
    install(monkeypatch, FakeMachine(gpus=[_pcie_gpu("NVIDIA Mystery X1", 48, (12, 0))]))
    assert main(["detect"]) == 0
    assert "not in the GPU catalog" in capsys.readouterr().out


def test_cli_detect_json(monkeypatch, capsys):
    install(monkeypatch, two_rtx_4090())
    assert main(["detect", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["cpu_only"] is False
    assert [gpu["catalog_name"] for gpu in report["gpus"]] == ["RTX-4090", "RTX-4090"]
    assert report["host"]["ram_total_bytes"] > 0


def test_cli_gpus_json_lists_the_catalog(capsys):
    assert main(["gpus", "--json"]) == 0
    entries = json.loads(capsys.readouterr().out)
    names = [entry["name"] for entry in entries]
    assert len([entry for entry in entries if entry["kind"] == "gpu"]) >= 20
    assert {"A100-80GB", "H100-80GB", "RTX-4090", "MI300X", "cpu"} <= set(names)
    a100 = entries[names.index("A100-80GB")]
    assert a100["dense_tflops"]["bf16"] == 312 and a100["interconnect"]["bandwidth_GBps_per_direction"] == 300


def test_cli_gpus_table(capsys):
    assert main(["gpus"]) == 0
    out = capsys.readouterr().out
    assert "A100-80GB" in out and "NVLink 3" in out and "cpu (placeholder)" in out


def test_real_cli_on_this_machine_exits_0_without_importing_torch():
    """The real pynvml here: CPU-only on a GPU-less box, a GPU report elsewhere; exit 0 either way."""
    script = (
        "import sys, json, io, contextlib\n"
        "from hardware_selector_cli.app import main\n"
        "out = io.StringIO()\n"
        "with contextlib.redirect_stdout(out):\n"
        "    code = main(['detect', '--json'])\n"
        "report = json.loads(out.getvalue())\n"
        "print(code, report['cpu_only'], 'torch' in sys.modules)\n"
    )
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    code, _cpu_only, torch_imported = result.stdout.split()
    assert code == "0" and torch_imported == "False"


def test_hardware_selector_script_detect_exits_0():
    result = subprocess.run(
        [sys.executable, "hardware_selector.py", "detect"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert "Host " in result.stdout
