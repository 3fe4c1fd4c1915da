"""Reading commands out of the README and docs/ (for the tests that run them as written)."""

from __future__ import annotations

import re


def code_block_after(text: str, heading: str) -> str:
    """The first ```bash block after ``heading`` in ``text``."""
    tail = text[text.index(heading):]
    return re.search(r"```bash\n(.*?)```", tail, re.S).group(1)


def commands(block: str) -> list[str]:
    """The commands of a code block, comments dropped and continuation lines joined."""
    text = block.replace("\\\n", " ")
    return [re.sub(r"\s+", " ", ln.split("#")[0]).strip() for ln in text.splitlines()
            if ln.split("#")[0].strip()]
