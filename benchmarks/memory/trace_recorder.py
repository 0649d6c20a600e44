"""The tracker that benchmarks/memory/memory_trace.py runs a training step under.

`recording_tracker(MemTracker)` (or FSDPMemTracker) subclasses PyTorch's own
memory tracker to record, after every op, each category's maximum, the peak
snapshot with its phase, and which attention kernels ran. It keeps no per-module
snapshots (display_modulewise_snapshots shows nothing).
"""

from __future__ import annotations

# Fused SDPA kernels: none of them stores the s x s attention matrix.
_FUSED_SDPA_OPS = (
    "_scaled_dot_product_flash_attention_for_cpu",
    "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_cudnn_attention",
)


def recording_tracker(base):
    """A subclass of MemTracker/FSDPMemTracker that records, after every op, each
    category's maximum, the peak snapshot with its phase, and which attention kernels
    ran. It keeps no per-module snapshots (display_modulewise_snapshots shows nothing)."""

    class Recording(base):
        def _setup_recording(self, fold: dict[str, str] | None) -> None:
            self.phase: str = "setup"
            self.fold = fold
            self.peak_total = -1
            self.peak_snapshot: dict[str, int] = {}
            self.peak_phase = "setup"
            self.max_native: dict[str, int] = {}
            self.max_common: dict[str, int] = {}
            self.peak_by_phase: dict[str, int] = {}
            self.fused_sdpa_calls = 0
            self.attention_softmax_calls = 0

        def _current(self) -> dict[str, int]:
            # Sum over devices (only "cpu" is expected); keys become plain strings.
            totals: dict[str, int] = {}
            for dev_snap in self._curr_mem_snap.values():
                for key, value in dev_snap.items():
                    name = getattr(key, "value", key)
                    totals[name] = totals.get(name, 0) + value
            return totals

        def _update_peak_stats(self, peak_state) -> None:
            # Replaces the base method, which after every op also walks every module's
            # stats to keep per-module peaks: two thirds of a 7B trace's time, and we
            # report step-level numbers only. The tracker's global peak is kept as before.
            for dev, dev_snap in self._curr_mem_snap.items():
                if self._peak_mem.get(dev, 0) < dev_snap["Total"]:
                    self._peak_mem[dev] = dev_snap["Total"]
                    self._peak_mem_snap[dev] = dict(dev_snap)
            now = self._current()
            total = now.get("Total", 0)
            common: dict[str, int] = {}
            for name, value in now.items():
                if name != "Total":
                    self.max_native[name] = max(self.max_native.get(name, 0), value)
                    key = self.fold.get(name, name) if self.fold else name
                    common[key] = common.get(key, 0) + value
            for name, value in common.items():
                self.max_common[name] = max(self.max_common.get(name, 0), value)
            self.peak_by_phase[self.phase] = max(self.peak_by_phase.get(self.phase, 0), total)
            if total > self.peak_total:
                self.peak_total, self.peak_snapshot, self.peak_phase = total, now, self.phase

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            res = super().__torch_dispatch__(func, types, args, kwargs)
            if res is not NotImplemented:
                name = func.overloadpacket.__name__
                if name in _FUSED_SDPA_OPS:
                    self.fused_sdpa_calls += 1
                elif name in ("_softmax", "_safe_softmax") and getattr(res, "dim", lambda: 0)() >= 4:
                    self.attention_softmax_calls += 1
            return res

    return Recording
