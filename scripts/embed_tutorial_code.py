"""Refresh the code each docs/tutorial chapter embeds from its script in docs/tutorial/code/.

A chapter marks its script with `<!-- code: NAME.py -->` followed by a python
block; this rewrites the block with the file's text. tests/test_tutorial.py
fails when a chapter and its script differ. Run: python scripts/embed_tutorial_code.py
"""

from __future__ import annotations

import re
from pathlib import Path

TUTORIAL = Path(__file__).resolve().parent.parent / "docs" / "tutorial"
EMBEDDED = re.compile(r"(<!-- code: (\S+) -->\n```python\n)(.*?)(```\n)", re.DOTALL)


def main() -> None:
    for page in sorted(TUTORIAL.glob("0*.md")):
        text = page.read_text(encoding="utf-8")
        fresh = EMBEDDED.sub(lambda m: m.group(1) + (TUTORIAL / "code" / m.group(2)).read_text() + m.group(4), text)
        if fresh != text:
            page.write_text(fresh, encoding="utf-8")
            print(f"updated {page.relative_to(TUTORIAL.parent.parent)}")


if __name__ == "__main__":
    main()
