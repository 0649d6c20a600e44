"""Durations as users type them: `--deadline 7d`, `36h`, `90m`, `2w` (docs/search.md, "Cost across clouds")."""

from __future__ import annotations

import math
import re

from planner.errors import UserInputError

UNIT_SECONDS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 7 * 86400.0}
MAX_DURATION_S = 100 * 365 * 86400.0  # a century: anything longer is a typo


def parse_duration(text: str, flag: str = "--deadline") -> float:
    """Seconds in `text`: a positive number and one unit of s, m, h, d or w; one-line error otherwise."""
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([smhdw])\s*", text.lower())
    if match is None:
        raise UserInputError(f"{flag} must be a duration such as 7d, 36h, 90m or 2w, not {text!r}")
    seconds = float(match[1]) * UNIT_SECONDS[match[2]]
    if not math.isfinite(seconds) or seconds <= 0 or seconds > MAX_DURATION_S:
        raise UserInputError(f"{flag} must be more than 0 and at most 100 years, not {text!r}")
    return seconds
