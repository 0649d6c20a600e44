"""Ground-truth memory traces of one real Hugging Face training step, on the CPU, without real memory.

`run_trace(TraceConfig)` builds a real transformers model from its config inside
`torch._subclasses.fake_tensor.FakeTensorMode` (every tensor is a FakeTensor: shapes,
dtypes and storages exist, the bytes do not), then runs one training step
(forward + loss, backward, optimizer step, zero_grad) under PyTorch's own memory
tracker and reports what each category of tensor occupied:

* world_size == 1: `torch.distributed._tools.mem_tracker.MemTracker`. Categories are
  `_MemRefType`: Parameter, Buffer, Gradient, Activation, Temp (tensors created in the
  backward, e.g. activation gradients), Optstate, Other (the input batch).
* world_size > 1: FSDP2 `fully_shard` (FULL_SHARD: one unit per transformer layer — the
  modules HF marks as `GradientCheckpointingLayer` — plus the root) on the `fake` process
  group (no other ranks exist; collectives return at once) and
  `torch.distributed._tools.fsdp2_mem_tracker.FSDPMemTracker`, whose categories are
  `_FSDPRefType` (Sharded/Unsharded Param, Sharded/Unsharded Grad, All Gather, Reduce
  Scatter, Buffer, Activation, Temp, OptState, Inputs). Numbers are per rank (rank 0).
  `normalized_*` folds them into the `_MemRefType` names (see `_FSDP_TO_COMMON`).

MemTracker keys its books by `tensor.device` and tracks every device: CPU tensors are
counted like CUDA ones, except that CUDA sizes are rounded up to the caching allocator's
512-byte blocks and CPU sizes are exact (see `_WeakRefInfo._calculate_mem_consumed`).
Nothing here models allocator fragmentation, the CUDA context or cuBLAS workspaces.
Per-module snapshots are not kept (see `_recording_tracker`): a 7B step traces in ~6 s.

Precision modes (exactly what the code below does):

* ``fp32``: parameters, gradients, optimizer states and activations all fp32.
* ``bf16-mixed`` / ``fp16-mixed``: parameters stay fp32, so gradients and optimizer states
  are fp32. world_size 1: forward and loss run under ``torch.autocast("cpu", dtype)``
  (PyTorch AMP): matmul/SDPA outputs are low precision, and autocast keeps a low-precision
  copy of every weight that enters a matmul (cached for the forward, then held by
  autograd for the backward, so it shows as Activation; embeddings stay fp32). world_size > 1: FSDP2
  ``MixedPrecisionPolicy(param_dtype=bf16|fp16, reduce_dtype=fp32)``: sharded params fp32,
  all-gathered (unsharded) params low precision, no autocast. No GradScaler for fp16
  (it holds a few scalars).
* ``bf16``: the model is built in bf16 (`from_config(dtype=bf16)`); parameters,
  gradients, activations and optimizer states are bf16 (AdamW `step` counters stay fp32
  scalars; Adafactor computes its update in fp32 temporaries).

Other fixed choices, all chosen to mirror a typical CUDA training step:

* The step is a steady-state step: optimizer states exist before the traced forward
  (made by one untraced `optimizer.step()` on zero gradients), `zero_grad(set_to_none=True)`.
* Optimizers: ``adamw`` = torch AdamW (foreach=True, the CUDA default: the step makes
  whole-group temporaries, counted as Optstate); ``sgd`` = SGD momentum 0.9 (one state);
  ``adafactor`` = transformers Adafactor (factored second moment, no first moment,
  fixed lr; scale_parameter/relative_step off because they need data-dependent Python).
* ``use_cache=False``; `model.tie_weights()` after `from_config` (transformers 5 leaves
  tied weights untied otherwise); model in train mode. MoE models use the
  ``grouped_mm`` experts implementation (the default eager loop calls `nonzero()`,
  which fake tensors cannot answer), through transformers' own custom-op fallback
  (the meta kernel of `aten._grouped_mm` accepts only bf16); it allocates what a grouped
  GEMM does: (tokens x top_k, width) outputs, full-size expert-weight gradients. Expert
  matmuls run in the weight dtype (autocast does not cover them).
* Loss: causal-LM loss with labels = input_ids for decoders, MLM-style loss with
  labels = input_ids for BERT-like encoders, seq2seq loss for T5 (decoder length = seq_len).
* ``activation_checkpointing="full"``: HF `gradient_checkpointing_enable` with
  `use_reentrant=False` (every `GradientCheckpointingLayer` is recomputed).
  ``"selective"``: Korthikanti et al.'s selective recomputation, i.e. the attention core
  (q·kᵀ, softmax, dropout, ·v; for SDPA the kernel) recomputed in backward. HF has no
  such mode, so the trace wraps the attention function the model calls (the "sdpa" entry
  of transformers' AttentionInterface, or the modeling module's `eager_attention_forward`)
  in a non-reentrant `torch.utils.checkpoint`: only its inputs q, k, v (before repeat_kv)
  and the mask are kept. Not available for T5 (its attention is inline).
  ``"op"``: our backends' op-level checkpointing of each block (backends/parts/op_checkpoint_policy.py:
  every second matmul's output and the attention kernel's kept, the rest recomputed).

Attention: ``attention="sdpa"`` stands for the fused flash / memory-efficient kernel on
CUDA. On CPU, SDPA dispatches to `aten._scaled_dot_product_flash_attention_for_cpu`
(verified also under FakeTensorMode, with `is_causal`, a boolean mask or a float mask
without grad): it saves only
the output and a (b, h, s) logsumexp, never an s x s tensor. With attention dropout > 0
CPU SDPA falls back to the math path, which stores the s x s probabilities and a dropout
mask — unlike flash on CUDA. So for ``sdpa`` the attention dropout is set to 0 (hidden
dropout stays as the config says), and the trace mirrors "sdpa-flash-equivalent".
``attention="eager"`` keeps the config's attention dropout and stores s x s scores
("eager/math"). The kernel reported is read off the ops that actually ran ("mixed" when
both ran: e.g. T5 with sdpa, whose learned relative-position bias is a float mask that
needs a gradient, sends self-attention down the CPU math path).

Known CPU-vs-CUDA difference: CPU autocast returns bf16 from layer_norm/softmax, while
CUDA autocast runs them in fp32 and returns fp32, so mixed-precision activations of
LayerNorm models (GPT-2, OPT, BERT) are somewhat lower here than on CUDA.
"""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path
from typing import Any, Literal
from unittest import mock

from pydantic import BaseModel, ConfigDict, Field

from .selective_checkpoint import checkpoint_attention
from .trace_inputs import model_class, traced_batch
from .trace_recorder import recording_tracker
from .trace_sharding import context_parallel_batch, fake_process_group, fsdp_wrap

REPO_ROOT = Path(__file__).resolve().parents[2]
CATALOG_MODELS_DIR = REPO_ROOT / "planner" / "catalog" / "models"

Precision = Literal["fp32", "bf16-mixed", "fp16-mixed", "bf16"]
Phase = Literal["setup", "forward", "backward", "optimizer"]

# Config keys that hold the attention-probability dropout, per model family.
_ATTENTION_DROPOUT_KEYS = ("attn_pdrop", "attention_probs_dropout_prob", "attention_dropout")
_HIDDEN_DROPOUT_KEYS = ("resid_pdrop", "hidden_dropout_prob", "dropout", "dropout_rate")
# FSDPMemTracker category -> MemTracker category, so both world sizes compare.
_FSDP_TO_COMMON = {
    "Sharded Param": "Parameter",
    "Unsharded Param": "Parameter",
    "All Gather": "Parameter",
    "Buffer": "Buffer",
    "Sharded Grad": "Gradient",
    "Unsharded Grad": "Gradient",
    "Reduce Scatter": "Gradient",
    "Activation": "Activation",
    "Temp": "Temp",
    "OptState": "Optstate",
    "Inputs": "Other",
}
COMMON_CATEGORIES = ("Parameter", "Buffer", "Gradient", "Activation", "Temp", "Optstate", "Other")


class TraceConfig(BaseModel):
    """One training step to trace."""

    model_config = ConfigDict(extra="forbid")

    label: str
    # An HF config dict (must contain "model_type"), or the name of a catalog file
    # planner/catalog/models/<name>.json whose "config" key is such a dict.
    model: str | dict[str, Any]
    micro_batch: int = Field(ge=1)
    seq_len: int = Field(ge=1)
    precision: Precision = "bf16-mixed"
    activation_checkpointing: Literal["none", "selective", "op", "full"] = "none"
    optimizer: Literal["adamw", "sgd", "adafactor"] = "adamw"
    attention: Literal["sdpa", "eager"] = "sdpa"
    world_size: int = Field(default=1, ge=1)
    context_parallel: int = Field(default=1, ge=1)  # cp ranks sharing each sequence (of world_size, FSDP over all)
    fast: bool = False  # part of the quick subset (run_memory_traces.py --fast)
    notes: str = ""


class TraceResult(BaseModel):
    """What one traced step occupied, per rank, in bytes."""

    label: str
    config: TraceConfig
    tracker: str
    model_class: str
    param_count: int  # unique parameters of the unsharded model
    peak_bytes: int
    peak_phase: Phase
    at_peak: dict[str, int]  # tracker's own categories at the peak moment
    max_per_category: dict[str, int]  # each category's own maximum over the step
    normalized_at_peak: dict[str, int]  # the same, folded into COMMON_CATEGORIES
    normalized_max_per_category: dict[str, int]
    peak_by_phase: dict[str, int]  # highest total seen in each phase
    at_end: dict[str, int]  # still held after step + zero_grad: params, buffers, optimizer states
    attention_kernel: Literal["sdpa-flash-equivalent", "eager/math", "mixed"]
    fused_sdpa_calls: int
    attention_softmax_calls: int  # softmaxes over >= 4-D tensors: s x s scores
    attention_dropout: float
    hidden_dropout: float | None
    wall_seconds: float
    torch_version: str
    transformers_version: str


def resolve_model_config(model: str | dict[str, Any]) -> dict[str, Any]:
    """The HF config dict for a TraceConfig.model (inline dict or catalog name)."""
    if isinstance(model, dict):
        return dict(model)
    path = CATALOG_MODELS_DIR / f"{model}.json"
    if not path.is_file():
        known = sorted(p.stem for p in CATALOG_MODELS_DIR.glob("*.json"))
        raise FileNotFoundError(f"no catalog model file {path} (known: {known})")
    return dict(json.loads(path.read_text(encoding="utf-8"))["config"])


def _build_hf_config(trace: TraceConfig):
    from transformers import AutoConfig

    raw = resolve_model_config(trace.model)
    for key in ("quantization_config", "torch_dtype", "dtype", "_name_or_path", "transformers_version"):
        raw.pop(key, None)
    config = AutoConfig.for_model(raw.pop("model_type"), **raw)
    config.use_cache = False  # training: no KV cache
    if trace.attention == "sdpa":
        # Flash/memory-efficient kernels on CUDA do dropout inside the kernel; CPU SDPA
        # with dropout would fall back to the math path and store s x s probabilities.
        for key in _ATTENTION_DROPOUT_KEYS:
            if hasattr(config, key):
                setattr(config, key, 0.0)
    if config.is_encoder_decoder and getattr(config, "decoder_start_token_id", None) is None:
        # T5 shifts labels right with this id; HF's T5 checkpoints use the pad id 0.
        config.decoder_start_token_id = getattr(config, "pad_token_id", None) or 0
    if getattr(config, "num_local_experts", None) and config.model_type != "llama4_text":  # Llama 4: own bmm loop
        config._experts_implementation = "grouped_mm"
    return config


def _frozen_parameters_as_buffers(model) -> None:
    """MemTracker hooks every parameter's gradient and cannot hook a frozen one (Whisper's sinusoid table):
    hold such tensors as buffers, which take the same bytes and, like frozen parameters, get no gradient."""
    for module in model.modules():
        for name, param in list(module.named_parameters(recurse=False)):
            if not param.requires_grad:
                delattr(module, name)
                module.register_buffer(name, param.detach())


def _zero_module_attention_dropout(model) -> None:
    # T5 has one dropout_rate for hidden and attention dropout; its attention modules
    # copy it into a float attribute `dropout` used only for the attention probabilities.
    for module in model.modules():
        if type(module).__name__.endswith("Attention") and isinstance(getattr(module, "dropout", None), float):
            module.dropout = 0.0


def _make_optimizer(name: str, params):
    import torch

    if name == "adamw":
        return torch.optim.AdamW(params, lr=1e-4, weight_decay=0.01, foreach=True)
    if name == "sgd":
        return torch.optim.SGD(params, lr=1e-2, momentum=0.9, foreach=True)
    from transformers.optimization import Adafactor

    return Adafactor(params, lr=1e-3, scale_parameter=False, relative_step=False, warmup_init=False)


def _warm_optimizer(model, optimizer) -> None:
    # One untraced step on zero gradients creates the optimizer states, so the traced
    # step is a steady-state step (states alive during forward and backward).
    import torch

    for param in model.parameters():
        if param.requires_grad:
            param.grad = torch.zeros_like(param)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def _traced_step(trace: TraceConfig, config, mesh, low, autocast, cp_group=None):
    """Build the model under FakeTensorMode and run the tracked step; see run_trace."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
    from torch.distributed._tools.mem_tracker import MemTracker
    from transformers.integrations import moe

    with contextlib.ExitStack() as stack:
        stack.enter_context(FakeTensorMode())
        stack.enter_context(mock.patch.object(moe, "_can_use_grouped_mm", lambda *args: False))
        if config.model_type in ("vit", "llava"):  # truncated-normal inits read values, which fake tensors lack
            from transformers.initialization import no_init_weights

            stack.enter_context(no_init_weights())
        if config.model_type == "llava":  # counting image tokens reads values; the batch places them right
            stack.enter_context(
                mock.patch("transformers.models.llava.modeling_llava.torch_compilable_check", lambda *args: None)
            )
        # Pure bf16 is built in bf16 (as from_pretrained(dtype=bf16) would): `model.to()`
        # cannot swap tied fake parameters ("Cannot swap ... weakref").
        dtype = torch.bfloat16 if trace.precision == "bf16" else torch.float32
        model = model_class(config).from_config(config, attn_implementation=trace.attention, dtype=dtype)
        model.tie_weights()
        if trace.attention == "sdpa":
            _zero_module_attention_dropout(model)
        model.train()
        if trace.activation_checkpointing == "full":
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        elif trace.activation_checkpointing == "selective":
            checkpoint_attention(stack, model)
        elif trace.activation_checkpointing == "op":
            from backends.parts.activation_checkpointing import apply_activation_checkpointing

            apply_activation_checkpointing(model, "op")  # what our backends run (op_checkpoint_policy.py)
        param_count = sum(p.numel() for p in model.parameters())
        if mesh is not None:
            fsdp_wrap(model, mesh, trace.precision)
        else:
            _frozen_parameters_as_buffers(model)
        optimizer = _make_optimizer(trace.optimizer, model.parameters())
        _warm_optimizer(model, optimizer)

        if cp_group is not None:  # one rank's zig-zag share of each sequence, attending over the gathered K/V
            batch, input_ids, loss_of = context_parallel_batch(model, config, trace, cp_group)
        else:
            batch, input_ids, loss_of = traced_batch(config, trace.micro_batch, trace.seq_len, dtype)
        if mesh is None:
            tracker = recording_tracker(MemTracker)()
            tracker._setup_recording(fold=None)
            tracker.track_external(model, optimizer, input_ids)
        else:
            tracker = recording_tracker(FSDPMemTracker)(model, optimizer)
            tracker._setup_recording(fold=_FSDP_TO_COMMON)
            tracker.track_inputs((input_ids,))

        with tracker:
            tracker.phase = "forward"
            with torch.autocast("cpu", dtype=low, enabled=autocast):
                loss = loss_of(model(**batch))
            tracker.phase = "backward"
            loss.backward()
            tracker.phase = "optimizer"
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            del loss  # the scalar loss is the only activation left; drop it before the end snapshot
            at_end = {k: v for k, v in tracker._current().items() if k != "Total"}

    return model, tracker, param_count, at_end


def run_trace(trace: TraceConfig) -> TraceResult:
    """Trace one steady-state training step of `trace` and report its memory."""
    import torch
    import transformers

    started = time.perf_counter()
    config = _build_hf_config(trace)
    mesh, cp_group = (
        fake_process_group(trace.world_size, trace.context_parallel) if trace.world_size > 1 else (None, None)
    )
    low = {"bf16-mixed": torch.bfloat16, "fp16-mixed": torch.float16}.get(trace.precision)
    autocast = low is not None and trace.world_size == 1

    try:
        model, tracker, param_count, at_end = _traced_step(trace, config, mesh, low, autocast, cp_group)
    finally:
        if mesh is not None:  # a later trace may need another world size
            import torch.distributed as dist

            dist.destroy_process_group()

    kernel = "eager/math"
    if tracker.fused_sdpa_calls and not tracker.attention_softmax_calls:
        kernel = "sdpa-flash-equivalent"
    elif tracker.fused_sdpa_calls:
        kernel = "mixed"
    native_peak = {k: v for k, v in tracker.peak_snapshot.items() if k != "Total"}
    fold = tracker.fold or {}
    normalized_peak = dict.fromkeys(COMMON_CATEGORIES, 0)
    for name, value in native_peak.items():
        normalized_peak[fold.get(name, name)] += value
    hidden = [getattr(config, k) for k in _HIDDEN_DROPOUT_KEYS if isinstance(getattr(config, k, None), float)]
    attn_drop = [getattr(config, k) for k in _ATTENTION_DROPOUT_KEYS if isinstance(getattr(config, k, None), float)]
    if config.model_type == "t5":
        attn_drop = [0.0 if trace.attention == "sdpa" else config.dropout_rate]
    return TraceResult(
        label=trace.label,
        config=trace,
        tracker=type(tracker).__mro__[1].__name__,
        model_class=type(model).__name__.removeprefix("FSDP"),
        param_count=param_count,
        peak_bytes=tracker.peak_total,
        peak_phase=tracker.peak_phase,
        at_peak=native_peak,
        max_per_category=dict(tracker.max_native),
        normalized_at_peak=normalized_peak,
        normalized_max_per_category={c: tracker.max_common.get(c, 0) for c in COMMON_CATEGORIES},
        peak_by_phase=dict(tracker.peak_by_phase),
        at_end=at_end,
        attention_kernel=kernel,
        fused_sdpa_calls=tracker.fused_sdpa_calls,
        attention_softmax_calls=tracker.attention_softmax_calls,
        attention_dropout=attn_drop[0] if attn_drop else 0.0,
        hidden_dropout=hidden[0] if hidden else None,
        wall_seconds=round(time.perf_counter() - started, 3),
        torch_version=torch.__version__,
        transformers_version=transformers.__version__,
    )
