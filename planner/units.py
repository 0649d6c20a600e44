"""Human-readable numbers. Memory is shown in GiB (2**30 bytes), the unit GPU
memory is actually sized in ("80GB" GPUs hold 80 GiB)."""

from __future__ import annotations

GIB = 2**30


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """'1 request', '2 requests'; `plural` where adding an s is wrong ('1 process', '2 processes')."""
    return f"{count} {noun if count == 1 else plural or noun + 's'}"


def format_count(value: float) -> str:
    """124439808 -> '124.4M', 6738415616 -> '6.74B'."""
    for threshold, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if abs(value) >= threshold:
            scaled = value / threshold
            digits = 2 if scaled < 10 else 1 if scaled < 100 else 0
            return f"{scaled:.{digits}f}{suffix}"
    return f"{value:.0f}"


def format_bytes(value: float) -> str:
    """Bytes in GiB below 1 TiB, TiB above; MiB for small amounts."""
    if abs(value) >= 1024 * GIB:
        return f"{value / (1024 * GIB):.2f} TiB"
    if abs(value) >= GIB:
        return f"{value / GIB:.2f} GiB"
    return f"{value / 2**20:.1f} MiB"
