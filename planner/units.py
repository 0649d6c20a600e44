"""Human-readable numbers. Memory is shown in GiB (2**30 bytes), the unit GPU
memory is actually sized in ("80GB" GPUs hold 80 GiB)."""

from __future__ import annotations

GIB = 2**30


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """'1 request', '2 requests'; `plural` where adding an s is wrong ('1 process', '2 processes')."""
    return f"{count} {noun if count == 1 else plural or noun + 's'}"


def _in_unit(value: float, threshold: float) -> str:
    """value / threshold with 3 significant figures (2 decimals below 10, 1 below 100), counted after rounding."""
    scaled = value / threshold
    for digits, limit in ((2, 10), (1, 100)):
        if abs(round(scaled, digits)) < limit:
            return f"{scaled:.{digits}f}"
    return f"{scaled:.0f}"


def format_count(value: float) -> str:
    """6738415616 -> '6.74B', 124439808 -> '124M'; a value that rounds up to the next unit is said in it
    (999,885,952 -> '1.00B', not '1000M')."""
    units = ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K"), (1.0, ""))
    for index, (threshold, suffix) in enumerate(units):
        if abs(value) >= threshold or threshold == 1.0:
            if index and abs(round(value / threshold)) >= 1000:  # e.g. 999.9M: say 1.00B
                bigger, bigger_suffix = units[index - 1]
                return _in_unit(value, bigger) + bigger_suffix
            return f"{value:.0f}" if threshold == 1.0 else _in_unit(value, threshold) + suffix
    raise AssertionError("unreachable: the last unit takes every value")


def format_bytes(value: float) -> str:
    """Bytes in GiB below 1 TiB, TiB above; MiB for small amounts."""
    if abs(value) >= 1024 * GIB:
        return f"{value / (1024 * GIB):.2f} TiB"
    if abs(value) >= GIB:
        return f"{value / GIB:.2f} GiB"
    return f"{value / 2**20:.1f} MiB"


# A duration's unit: (seconds per unit, its name, where the next unit takes over).
DURATION_UNITS = ((1e-3, "ms", 1000), (1.0, "s", 60), (60.0, "min", 60), (3600.0, "h", 48))


def format_seconds(seconds: float) -> str:
    """A duration in the unit that reads best, to three significant figures: 0.000412 -> '0.412 ms',
    2.8015 -> '2.8 s', 2801.5 -> '46.7 min', 3e5 -> '3.47 d'. No figure rounds to 0 or grows to seven digits."""
    if seconds != seconds or seconds in (float("inf"), float("-inf")):
        return f"{seconds} s"
    if seconds < 1e-3:
        return f"{seconds * 1e3:.3g} ms"  # beside the other serving times in ms, rather than in µs
    for scale, unit, next_at in DURATION_UNITS:
        if float(f"{seconds / scale:.3g}") < next_at:
            return f"{seconds / scale:.3g} {unit}"
    days = seconds / 86400
    return f"{days:.3g} d" if days < 1000 else f"{days:,.0f} d"


def format_dollars(value: float, *, compact: bool = True) -> str:
    """A cost that never shows a small run as free: '$0.02', '<$0.01'; whole dollars from $100, and for a table's
    column (`compact`) '$12.3k' from $10,000 ('$12,345' in a sentence). Exactly 0 (a price of $0, the machine
    you already have) is '$0'."""
    if value == 0:
        return "$0"
    if value < 0.01:
        return "<$0.01"
    if value < 100:
        return f"${value:.2f}"
    if not compact:
        return f"${value:,.0f}"
    for limit, unit, suffix in ((1e9, 1e9, "G"), (1e6, 1e6, "M"), (1e4, 1e3, "k")):
        if value >= limit:
            return f"${value / unit:.3g}{suffix}"
    return f"${value:,.0f}"
