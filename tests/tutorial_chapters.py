"""The tutorial's parallel chapters, one after another in one torchrun job (`python tests/tutorial_chapters.py
OUT CHAPTER[:ARG] ...`), for tests/test_tutorial.py.

Each chapter script runs unchanged, as its own `__main__` with its own argv. Only the launch and its process
group are shared (a torchrun job per chapter costs each rank its imports again): the first chapter's
`init_process_group` starts the group, the later ones find it started, and every chapter's
`destroy_process_group` waits until the last chapter has run (a default group started again on torchrun's
store after being destroyed waits forever on this torch). One chapter keeps a launch of its own in the
test, the command its page prints, and so its own start and end of the group. Each rank writes its
chapters' printed lines to OUT.rankN.json (chapter -> output): a pipeline's last stage prints the losses,
so the test reads every rank's, as torchrun's output holds them.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import runpy
import sys
from pathlib import Path

import torch.distributed as dist

CODE = Path(__file__).resolve().parent.parent / "docs" / "tutorial" / "code"


def main() -> None:
    out, chapters = Path(sys.argv[1]), sys.argv[2:]
    sys.path.insert(0, str(CODE))  # the chapters import their common.py, as `python CHAPTER` would find it
    os.chdir(CODE)
    start, destroy = dist.init_process_group, dist.destroy_process_group
    dist.init_process_group = lambda *args, **kwargs: None if dist.is_initialized() else start(*args, **kwargs)
    dist.destroy_process_group = lambda *args, **kwargs: None
    printed = {}
    for chapter in chapters:
        script, _, arg = chapter.partition(":")
        sys.argv = [script, *([arg] if arg else [])]
        captured = io.StringIO()
        with contextlib.redirect_stdout(captured):
            runpy.run_path(str(CODE / script), run_name="__main__")
        printed[chapter] = captured.getvalue()
    destroy()
    out.with_name(f"{out.name}.rank{os.environ['RANK']}.json").write_text(json.dumps(printed), encoding="utf-8")


if __name__ == "__main__":
    main()
