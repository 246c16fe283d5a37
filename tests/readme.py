"""The README's Python blocks, for the tests that run them as a user would.

A block preceded by ``<!-- ... tested: <test file> -->`` is run by that test of its own,
which also checks what it prints; `tests/integration/test_readme.py` runs the others.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.fakes import ROOT

README = ROOT / "README.md"
BLOCK = re.compile(r"^(?:<!--[^>]*tested: (\S+) -->\n)?```python\n(.*?)^```", re.S | re.M)


def python_blocks() -> list[tuple[int, str, str | None]]:
    """Each block: the README line it starts on, its code, the test of its own if any."""
    text = README.read_text("utf-8")
    return [
        (text[: m.start()].count("\n") + 1, m.group(2), m.group(1)) for m in BLOCK.finditer(text)
    ]


def own_block(test_file: str | Path) -> str:
    """The code of the one block the test ``test_file`` (its ``__file__``) is named on."""
    name = Path(test_file).resolve().relative_to(ROOT).as_posix()
    found = [code for _, code, own_test in python_blocks() if own_test == name]
    assert len(found) == 1, f"README.md has {len(found)} python blocks tested by {name}"
    return found[0]
