"""The code blocks of the README and the docs, read as the tests run them.

Every fenced code block is run, in the language its fence names (a ```text block is a figure or a
sample of output, not code, and is not run), unless a comment on the line before marks it as needing
what the suite does not have:

    <!-- snippet: needs=gpu -->            a GPU (needs=cluster: Kubernetes, or Ray across machines)
    <!-- snippet: same-folder -->          runs after the block before it on the page, in its folder
    <!-- snippet: config=train -->         a TOML block: `tether train --config BLOCK --print-config`

bash blocks run with `bash -euo pipefail` in a fresh folder holding `examples/` (the repository's), with
this environment's `tether` and `python` first on PATH and `TETHER_MODEL=tiny-random`, so a command
written for SmolLM2 runs in seconds; python blocks run as a file there; json blocks must parse (a block
of JSON lines, each line); a yaml block needs a cluster or is parsed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUN_LANGUAGES = frozenset({"bash", "python", "toml", "json", "yaml"})
TEXT = "text"
NEEDS = frozenset({"gpu", "cluster"})
_FENCE = re.compile(r"^(?P<indent>\s*)```(?P<lang>[\w+-]*)\s*$")
_DIRECTIVE = re.compile(r"^\s*<!--\s*snippet:(?P<body>.*?)-->\s*$")


@dataclass
class Block:
    page: str  # relative to the repository
    line: int  # the fence's line, 1-based
    language: str
    code: str
    options: dict[str, str] = field(default_factory=dict)

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def needs(self) -> str | None:
        return self.options.get("needs")


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def blocks_of(path: Path) -> list[Block]:
    lines = path.read_text().splitlines()
    found: list[Block] = []
    index = 0
    while index < len(lines):
        fence = _FENCE.match(lines[index])
        if fence is None:
            index += 1
            continue
        indent = len(fence["indent"])
        end = next(
            (j for j in range(index + 1, len(lines)) if lines[j].strip() == "```"),
            None,
        )
        if end is None:
            raise ValueError(f"{path}:{index + 1}: a code block that is never closed")
        code = "\n".join(line[indent:] for line in lines[index + 1 : end]) + "\n"
        options = _options(lines[index - 1]) if index > 0 else {}
        found.append(Block(str(path.relative_to(ROOT)), index + 1, fence["lang"], code, options))
        index = end + 1
    return found


def _options(line: str) -> dict[str, str]:
    directive = _DIRECTIVE.match(line)
    if directive is None:
        return {}
    options = {}
    for word in directive["body"].split():
        key, _, value = word.partition("=")
        options[key] = value
    return options


def chains(blocks: list[Block]) -> list[list[Block]]:
    """Blocks that run together: one block and the `same-folder` blocks right after it."""
    grouped: list[list[Block]] = []
    for block in blocks:
        if "same-folder" in block.options and grouped and grouped[-1][0].page == block.page:
            grouped[-1].append(block)
        else:
            grouped.append([block])
    return grouped


def all_blocks() -> list[Block]:
    return [block for page in pages() for block in blocks_of(page)]


def code_blocks() -> list[Block]:
    return [block for block in all_blocks() if block.language != TEXT]
