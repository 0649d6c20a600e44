"""The bounds every number a user gives is checked against, in one place (docs/errors.md).

The CLI, the Python API and the config readers call these checks, so a NaN,
an infinity, a zero where none can be, or a count beyond any real cluster is
one line that names the flag or argument and the bound, never a traceback, a
nonsense plan or a search that runs for minutes. The bounds are far beyond
any real job, so they refuse typos and overflows, not ambitious plans.
"""

from __future__ import annotations

import math

from planner.errors import UserInputError, UserInputTypeError

# Not a bound but a default, kept beside them: the share of GPU memory a plan keeps free (allocator spikes, NCCL's
# own buffers, a batch longer than the average). `plan`, `estimate` and the Python API all default to it, and
# their output says so ("72.0 GiB usable (80.0 GiB less 10% headroom)").
DEFAULT_HEADROOM = 0.1

MAX_GPUS = 1 << 20  # a million GPUs in one job
MAX_GPUS_PER_NODE = 1024
MAX_SEQ_LEN = 1 << 24  # 16M tokens per sequence
MAX_BATCH = 1 << 24  # sequences per step
MAX_PARAMS = 1e15  # a quadrillion parameters
MAX_GIB = float(1 << 20)  # a PiB of host RAM, NVMe or GPU memory
MAX_PRICE_PER_HOUR = 1e6  # USD per GPU-hour
MAX_TOKENS = 1e18  # training tokens
MAX_BANDWIDTH_GBPS = 1e6
# The largest published models have under 200 blocks; 512 leaves over twice that and keeps a config's
# meta-device build to seconds (4,096 layers took 21 s, tests/test_fuzz_inputs.py).
MAX_LAYERS = 512
MAX_WIDTH = 1 << 24  # hidden, FFN, vocabulary or position counts read from a config


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_count(name: str, value: object, *, high: int, low: int = 1) -> int:
    """A whole number in [low, high]; `name` is the flag or argument the message names."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool):
        raise UserInputTypeError(f"{name} must be a whole number, not {value!r}")
    if value < low:
        raise UserInputError(f"{name} must be at least {low}, not {value}")
    if value > high:
        raise UserInputError(f"{name} must be at most {high:,}, not {value:,}")
    return value


def check_number(name: str, value: object, *, high: float, low: float = 0.0, low_inclusive: bool = True) -> float:
    """A finite number in [low, high] (or (low, high]); NaN and infinity are refused by name."""
    if not _is_number(value):
        raise UserInputTypeError(f"{name} must be a number, not {value!r}")
    number = float(value)  # type: ignore[arg-type]
    if not math.isfinite(number):
        raise UserInputError(f"{name} must be a finite number, not {number}")
    if number < low or (number == low and not low_inclusive):
        raise UserInputError(f"{name} must be {'at least' if low_inclusive else 'more than'} {low:g}, not {number:g}")
    if number > high:
        raise UserInputError(f"{name} must be at most {high:g}, not {number:g}")
    return number


def check_name(name: str, value: object) -> str:
    """A non-empty string (a model, family or GPU name)."""
    if not isinstance(value, str):
        raise UserInputTypeError(f"{name} must be a string, not {value!r}")
    if not value.strip():
        raise UserInputError(f"{name} is empty")
    return value
