"""`python hardware_selector.py --help` (and the `hardware-selector` script) shows both interfaces: the commands,
and the seed tool's flags, which before showed only with `--model-family F --model-name M --help`. It stays a cheap
path: no pydantic, torch or transformers. Reference: the seed parser's own help (seed_cli._parser)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from hardware_selector_cli.seed_cli import SEED_FLAGS, _parser

REPO_ROOT = Path(__file__).resolve().parent.parent
PROBE = """
import sys
import hardware_selector
code = hardware_selector.main(["--help"])
heavy = sorted(name for name in ("pydantic", "pydantic_core", "torch", "transformers") if name in sys.modules)
print("HEAVY=" + ",".join(heavy), file=sys.stderr)
sys.exit(code)
"""


def test_help_shows_the_commands_and_the_seed_flags_and_stays_cheap() -> None:
    completed = subprocess.run([sys.executable, "-c", PROBE], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert completed.returncode == 0, completed.stderr
    assert completed.stderr.rstrip().endswith("HEAVY="), completed.stderr
    out = completed.stdout
    assert "plan" in out and "estimate" in out  # the commands
    assert all(flag in out for flag in SEED_FLAGS)  # the seed flags
    seed_usage = _parser().format_help().splitlines()[0]
    assert seed_usage in out
    assert out.index("Commands") < out.index(seed_usage)  # the commands first, as the full interface
