"""What an agent wrote, shown on the operator's terminal as text and nothing else.

Agent output, errors quoting its stderr, rollout outputs and the spans and rewards it sent are the
agent's text: printed through rich it would be read as markup (`[/red]` crashes the print, `[bold]`
styles it), and an ANSI escape or other control character in it would reach the terminal (colours, a
new window title, a cursor moved over earlier lines). `shown(...)` makes it a rich `Text` (never markup)
with every control character written out visibly: ESC is shown as `\\x1b`.
"""

from __future__ import annotations

import re

from rich.text import Text

# C0 controls but tab and newline, DEL, C1 controls, and the bidirectional overrides that reorder text.
CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def printable(value: object) -> str:
    """`value` as a string whose control characters are escapes one can read: `\\x1b`, `\\x0d`, `\\u202e`."""
    return CONTROLS.sub(_escape, str(value))


def shown(value: object) -> Text:
    """`value` as rich `Text`: its brackets are brackets, its control characters visible escapes."""
    return Text(printable(value))


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
