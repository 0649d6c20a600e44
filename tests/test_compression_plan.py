"""The planner's gradient compression (planner/gradient_compression.py): its counts against the code they count
(backends/parts/compressed_sum.py, traced op by op in this process), the estimates that use them, the search's
choice, the flags and the emitted engine.json; and the residuals against the engine's own on 2 ranks."""

from __future__ import annotations

import json

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from backends.parts.compressed_sum import CompressedSum, Compressor
from hardware_selector_cli.app import main
from planner.contract.choices import GradientCompression, Strategy
from planner.contract.layout import ParallelDims
from planner.gradient_compression import WIRE_BYTES, warmup_steps
from planner.hardware.cluster import make_cluster
from planner.memory.compression_buffers import PHASE1_PEAK, PHASE2_PEAK, compression_memory, unit_residual_elements
from planner.memory.rank_params import rank_params
from planner.models.hf_config import spec_from_hf_config
from planner.models.resolve import resolve_model
from planner.search import PlanRequest, search_plans
from planner.throughput.compressed_reduction import pass_bytes
from planner.throughput.estimate import estimate_throughput
from planner.training_config import TrainingConfig

NONE, INT8, ONEBIT = GradientCompression.NONE, GradientCompression.INT8, GradientCompression.ONEBIT
# Many nodes on a slow network, and one node of NVLink: where int8 pays, and where it does not.
SLOW = {"gpus_per_node": 8, "nodes": 8, "interconnect": "ethernet-25g"}
PLAN = ["plan", "--model", "llama-3.2-1b", "--gpu", "H100-80GB", "--no-calibration"]
PLAN_SLOW = [*PLAN, "--nodes", "8", "--interconnect", "ethernet-25g"]
ELEMENTS = 128 * 8 * 16  # whole blocks for every world below: no padding
WRITE_ONLY = ("copy_", "zero_", "fill_")  # in-place ops that write their first argument without reading it
ALLOCATIONS = ("empty", "empty_like", "empty_strided", "new_empty")


class _Traffic(TorchDispatchMode):
    """Bytes read and written by the aten ops run inside it (views free; an in-place op reads and writes its
    tensor), and the peak of the bytes its ops allocated that are still alive."""

    def __init__(self) -> None:
        super().__init__()
        self.bytes = 0
        self.live = self.peak = 0
        self._alive: set[int] = set()

    def _freed(self, key: int, size: int) -> None:
        self._alive.discard(key)
        self.live -= size

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        import weakref

        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        namespace, name = func._schema.name.split("::")
        if namespace != "aten" or any(
            r.alias_info is not None and not r.alias_info.is_write for r in func._schema.returns
        ):
            return out  # not a tensor op, or a view
        outputs = [tensor for tensor in tree_flatten(out)[0] if isinstance(tensor, torch.Tensor)]
        for tensor in outputs:
            storage = tensor.untyped_storage()
            key = storage.data_ptr()
            if key not in self._alive and storage.nbytes():
                self._alive.add(key)
                self.live += storage.nbytes()
                self.peak = max(self.peak, self.live)
                weakref.finalize(tensor, self._freed, key, storage.nbytes())
        if name in ALLOCATIONS:
            return out  # memory, but no traffic
        inputs = [tensor for tensor in tree_flatten((args, kwargs))[0] if isinstance(tensor, torch.Tensor)]
        read = inputs[1:] if name in WRITE_ONLY else inputs
        self.bytes += sum(t.numel() * t.element_size() for t in (*read, *outputs))
        return out


class _LocalSum(CompressedSum):
    """CompressedSum without a process group: its collectives leave the received tensors as they are (whatever
    torch.empty left there), so every op around them runs on tensors of the real shapes."""

    def __init__(self, mode: str, world: int):
        self.compressor = Compressor(mode)
        self.group, self.world, self.rank = None, world, 0
        self.worker_residuals, self.server_residuals, self.wire_bytes = {}, {}, 0

    def _all_to_all(self, output, tensor):
        pass

    def _all_gather(self, outputs, tensor):
        pass


def _traced(mode: str, world: int, dtype: torch.dtype, all_reduce: bool) -> _Traffic:
    summer = _LocalSum(mode, world)
    flat = torch.randn(ELEMENTS, generator=torch.Generator().manual_seed(0)).to(dtype)
    run = summer.all_reduce if all_reduce else summer.reduce_scatter
    run("bucket", flat)  # the first sum makes the residuals; the next ones add them in (the steady state)
    traffic = _Traffic()
    with traffic:
        run("bucket", flat)
    return traffic


@pytest.mark.parametrize("compression", [INT8, ONEBIT])
@pytest.mark.parametrize("world", [2, 8])
@pytest.mark.parametrize("all_reduce", [False, True])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_the_memory_traffic_counted_is_what_the_ops_of_a_compressed_sum_move(compression, world, all_reduce, dtype):
    traced = _traced(compression.value, world, dtype, all_reduce)
    grad_bytes = torch.empty(0, dtype=dtype).element_size()
    counted = pass_bytes(compression, all_reduce, grad_bytes).at(world)
    assert traced.bytes / ELEMENTS == pytest.approx(counted, rel=1e-3)


@pytest.mark.parametrize("compression", [INT8, ONEBIT])
@pytest.mark.parametrize("world", [2, 8])
@pytest.mark.parametrize("all_reduce", [False, True])
def test_a_sums_transient_memory_is_the_counted_peak_beside_the_new_residuals(compression, world, all_reduce):
    traced = _traced(compression.value, world, torch.float32, all_reduce)
    # The trace sees the residuals a sum makes anew, not the old ones they replace: the worker's from the first
    # phase on, the server's (all-reduce) from the second.
    worker = 4 * unit_residual_elements(ELEMENTS, world, partitioned=True)
    server = 4 * unit_residual_elements(ELEMENTS, world, partitioned=False) - worker
    first = PHASE1_PEAK[compression] * ELEMENTS + worker
    per_element, per_share = PHASE2_PEAK[compression]
    second = (per_element + per_share / world) * ELEMENTS + worker + server
    assert traced.peak == pytest.approx(max(first, second) if all_reduce else first, rel=0.01)


def test_unit_residuals_pad_each_ranks_chunk_to_whole_blocks():
    assert unit_residual_elements(256, 2, partitioned=True) == 256
    assert unit_residual_elements(130, 2, partitioned=True) == 2 * 128  # 65 per rank, one block each
    assert unit_residual_elements(300, 2, partitioned=False) == 2 * 256 + 256  # and the server's row


def _engine(compression: str, zero_stage: int, tp: int, **fields) -> TrainingConfig:
    return TrainingConfig(
        strategy="engine",
        zero_stage=zero_stage,
        layout=ParallelDims(tp=tp),
        sequence_parallel=tp > 1,
        compression=compression,
        **fields,
    )


def test_the_data_parallel_time_shrinks_with_the_wire_bytes_where_the_network_is_slow():
    spec = resolve_model("llama-3-8b")
    cluster = make_cluster("H100-80GB", gpus_per_node=8, nodes=4, interconnect="ethernet-25g")
    times = {
        mode: estimate_throughput(spec, _engine(mode, 0, 8, grad_accum=64), cluster).breakdown.data_parallel_comm_s
        for mode in ("none", "int8", "onebit")
    }
    # One dp rank per node: the all-to-all's bytes cross the node's network as a ring's do, a fraction of them.
    assert times["onebit"] < times["int8"] < times["none"]
    assert times["int8"] / times["none"] == pytest.approx(2 * WIRE_BYTES[INT8] / (2 * 2), rel=0.15)


def test_a_compressed_plan_names_its_bytes_and_its_source():
    spec = resolve_model("llama-3-8b")
    cluster = make_cluster("H100-80GB", gpus_per_node=8, nodes=4, interconnect="ethernet-25g")
    sources = estimate_throughput(spec, _engine("int8", 1, 8), cluster).sources
    assert sources["data_parallel_comm_s"].startswith(
        "formula (int8 gradients: 1.03 bytes/element, backends/parts/compressed_sum.py)"
    )
    # bf16 buckets cast to fp32, ZeRO-1 over dp 4: 6 + 107.25 + 4 / 4
    assert "114 bytes/element of compress/decompress" in sources["compression"]
    assert "compression" not in estimate_throughput(spec, _engine("none", 1, 8), cluster).sources


def test_auto_compresses_many_nodes_on_slow_ethernet_and_not_one_nvlink_node():
    spec = resolve_model("llama-3.2-1b")
    far = search_plans(spec, make_cluster("H100-80GB", **SLOW), PlanRequest(compression="auto"))
    assert far.best is not None and far.best.config.strategy is Strategy.ENGINE
    assert far.best.config.compression is INT8
    assert any(reason.startswith("--compression auto chose int8 gradients: ") for reason in far.best.reasons)
    assert "engine TP" in far.rejected and "slower than engine TP + int8" in far.rejected["engine TP"]
    near = search_plans(spec, make_cluster("H100-80GB", gpus_per_node=8), PlanRequest(compression="auto"))
    assert near.best is not None and near.best.config.compression is NONE
    assert any(reason.startswith("--compression auto tried int8 gradients on") for reason in near.best.reasons)
    for plan in far.candidates + near.candidates:
        assert plan.config.compression is not ONEBIT  # never picked by auto
    plain = search_plans(spec, make_cluster("H100-80GB", **SLOW), PlanRequest())
    assert all(plan.config.compression is NONE for plan in plain.candidates)  # the default: none


def test_onebit_given_is_honoured_and_its_measured_gap_printed_with_its_source(capsys):
    assert main([*PLAN_SLOW, "--compression", "onebit"]) == 0
    out = " ".join(capsys.readouterr().out.split())  # the table wraps long lines
    assert "1 engine TP + onebit" in out
    assert "warning: onebit is 1-bit Adam, another optimizer" in out and "ended -45% (ZeRO-0) against" in out
    assert '(measured: tests/test_compressed_sum.py, docs/parallelism.md "Gradient compression")' in out
    assert main([*PLAN_SLOW, "--compression", "onebit", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert {plan["config"]["compression"] for plan in document["candidates"]} == {"onebit"}
    # 1-bit Adam averages each rank's whole momentum: ZeRO-0 alone (ZeRO-1+ shard it).
    assert {plan["config"]["zero_stage"] for plan in document["candidates"]} == {0}


@pytest.mark.parametrize(
    "argv, message",
    [
        (["estimate", "-m", "gpt2", "--gpu", "A100-80GB", "--strategy", "fsdp", "--compression", "int8"],
         "only --strategy engine runs it, not fsdp"),
        (["estimate", "-m", "gpt2", "--gpu", "A100-80GB", "--strategy", "zero1", "--compression", "auto"],
         "only --strategy engine runs it, not deepspeed"),
        (["estimate", "-m", "gpt2", "--gpu", "A100-80GB", "--gpus-per-node", "2", "--strategy", "engine", "--tp",
          "2", "--compression", "int8"], "this layout has none on 2 GPU(s)"),
        (["estimate", "-m", "gpt2", "--gpu", "A100-80GB", "--strategy", "engine", "--compression", "int8",
          "--implementation", "megatron"], "--implementation megatron predicts another codebase"),
        ([*PLAN, "--strategies", "fsdp", "--compression", "int8"], "which only the engine runs"),
        ([*PLAN, "--strategies", "ddp", "--compression", "auto"], "add engine to --strategies"),
        ([*PLAN, "--gpus-per-node", "1", "--compression", "int8"], "1 GPU has none"),
        ([*PLAN, "--compression", "zip"], "--compression must be one of none|int8|onebit|auto, not 'zip'"),
        (["estimate", "-m", "gpt2", "--gpu", "A100-80GB", "--gpus-per-node", "2", "--strategy", "engine",
          "--zero-stage", "1", "--compression", "onebit"], "1-bit Adam, which needs each rank's whole momentum: "
         "ZeRO-0 only (--zero-stage 0), not ZeRO-1"),
        ([*PLAN, "--optimizer", "sgd", "--compression", "onebit"], "--optimizer sgd has no Adam variance to freeze"),
    ],
)  # fmt: skip
def test_compression_a_run_cannot_take_is_one_line(capsys, argv, message):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err


def test_estimate_auto_keeps_int8_where_it_is_faster(capsys):
    engine = ["estimate", "-m", "llama-3-8b", "--gpu", "H100-80GB", "--strategy", "engine", "--grad-accum", "16",
              "--compression", "auto", "--json"]  # fmt: skip
    assert main([*engine, "--nodes", "4", "--interconnect", "ethernet-25g", "--tp", "8"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["config"]["compression"] == "int8"
    assert document["compression_notes"][-1].startswith("--compression auto chose int8: step ")
    assert main([*engine, "--tp", "2"]) == 0  # one node of NVLink
    document = json.loads(capsys.readouterr().out)
    assert "compression" not in document["config"]  # uncompressed configs are written as before
    assert document["compression_notes"][0].startswith("--compression auto kept the gradients uncompressed")


@pytest.mark.parametrize("compression, steps, warmup", [("int8", None, 0), ("onebit", None, 40), ("onebit", 500, 100)])
def test_the_emitted_engine_json_runs_the_plans_compression(capsys, tmp_path, compression, steps, warmup):
    folder = tmp_path / "run"
    argv = [*PLAN_SLOW, "--compression", compression, "--emit", str(folder)]
    assert main([*argv, *(["--steps", str(steps)] if steps else [])]) == 0
    capsys.readouterr()
    block = json.loads((folder / "engine.json").read_text())["hardware_selector"]
    assert (block["compression"], block["compression_warmup_steps"]) == (compression, warmup)
    assert warmup == warmup_steps(GradientCompression(compression), steps)
    assert json.loads((folder / "plan.json").read_text())["config"]["compression"] == compression
    readme = (folder / "README.md").read_text()
    assert f"gradients compressed to {compression} with error feedback" in readme
    assert (f"its first {warmup} optimizer steps summed uncompressed" in readme) == bool(warmup)


@pytest.fixture(scope="module")
def engine_residuals(tmp_path_factory):
    from tests.distributed import run_torchrun

    out = tmp_path_factory.mktemp("residuals") / "held.json"
    run_torchrun(["tests/compression_residual_run.py", "--out", str(out)], nproc=2, timeout=600)
    return json.loads(out.read_text())


@pytest.mark.slow
@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_the_residual_estimate_is_what_the_engine_holds(engine_residuals, stage):
    from tests.parallel_runs import tiny_model_config

    held = engine_residuals[f"zero{stage}"]
    assert held["dtypes"] == ["torch.float32"]
    # Each unit exactly, padding and all: the worker's rows, and ZeRO-0's server row.
    exact = [unit_residual_elements(numel, 2, partitioned=stage > 0) for numel in held["units"]]
    assert exact == [worker + server for worker, server in zip(held["worker"], held["server"])]
    assert (sum(held["server"]) > 0) == (stage == 0)
    # The memory estimate, from the model's config alone (no units, no padding): within 1% on this tiny model.
    spec = spec_from_hf_config(tiny_model_config("gpt2"), name="tiny gpt2")
    config = TrainingConfig(strategy="engine", zero_stage=stage, precision="fp32", compression="int8")
    estimate = compression_memory(INT8, stage, rank_params(spec, config).trainable, 2, 0).residuals
    assert estimate == pytest.approx(4 * sum(exact), rel=0.01)
