"""hardware-selector: plan, check and run distributed training.

Run `hardware-selector --help` (or `python hardware_selector.py --help` from a
checkout). The Python API lives here too, so `from hardware_selector import ...`
works from both.
"""

from __future__ import annotations

import sys

from hardware_selector_cli.app import app, main  # noqa: F401  (re-exported)

if __name__ == "__main__":
    sys.exit(main())
