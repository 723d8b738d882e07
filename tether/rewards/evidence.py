"""What a scorer takes as evidence of a rollout's work, and what it only hears from the agent.

Recorded: the model calls the gateway served and recorded itself, spans of origin `gateway`. No agent can
write one: the store stamps every span that comes with a rollout token as the agent's, whatever the body
says (`tether.store.provenance.agent_span`, and the OTLP receiver likewise). Reported: the spans of origin
`agent`, what the agent says about itself (tools it ran, calls and results it claims). Nobody checked
them, so judges see them in a section of their own, marked as the agent's report, and reward servers in
a field of their own (`agent_reported`); never among the recorded calls. Any other span (a judge's own
calls, origin `judge`) is neither, and no scorer is shown it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tether.contracts import Origin, is_call_span
from tether.store.records import Span

REPLY_CHARS = 400  # of each reply, or reported line, within a summary
NO_CALLS = "(no model calls recorded)"
NOTHING_REPORTED = "(nothing reported)"


@dataclass(frozen=True)
class Evidence:
    recorded: list[Span]  # model calls the gateway recorded, in trace order
    reported: list[Span]  # spans the agent sent about itself, in trace order


def split_evidence(trace: Sequence[Span]) -> Evidence:
    """The trace's recorded calls apart from what its agent reported; other spans are left out."""
    recorded = [span for span in trace if span.origin == Origin.GATEWAY and is_call_span(span.name)]
    reported = [span for span in trace if span.origin == Origin.AGENT]
    return Evidence(recorded, reported)


def _first_choice(span: Span) -> dict[str, Any]:
    choices = span.attributes.get("choices")
    first = choices[0] if isinstance(choices, list) and choices else None
    return first if isinstance(first, dict) else {}


def reply_text(span: Span) -> str:
    """The text of a call span's first choice ('' when it has none)."""
    return str(_first_choice(span).get("text") or "")


def _tools_asked(span: Span) -> list[str]:
    response = span.attributes.get("response") or {}
    message = (response.get("choices") or [{}])[0].get("message") or {}
    return [str(call.get("function", {}).get("name")) for call in message.get("tool_calls") or []]


def _one_line(text: str) -> str:
    return text[:REPLY_CHARS].replace("\n", " ")


def trace_summary(trace: Sequence[Span]) -> str:
    """One line per recorded model call: its reply, cut, and the tools it asked for."""
    lines = []
    for span in split_evidence(trace).recorded:
        tools = _tools_asked(span)
        asked = f" [asked for tools: {', '.join(tools)}]" if tools else ""
        lines.append(f"model: {_one_line(reply_text(span))}{asked}")
    return "\n".join(lines) or NO_CALLS


def reported_summary(trace: Sequence[Span]) -> str:
    """One line per span the agent reported: a tool's name and status, a claimed call's reply, else the
    span's name and status."""
    lines = []
    for span in split_evidence(trace).reported:
        if is_call_span(span.name):
            lines.append(f"claimed model call: {_one_line(reply_text(span))}")
        elif span.name.startswith("tool") or "tool.name" in span.attributes:
            lines.append(f"tool {_one_line(str(span.attributes.get('tool.name', span.name)))}: {span.status}")
        else:
            lines.append(f"span {_one_line(span.name)}: {span.status}")
    return "\n".join(lines) or NOTHING_REPORTED


def recorded_calls(trace: Sequence[Span]) -> list[dict[str, Any]]:
    """Each recorded model call, for a reward server: the request the agent sent and the reply's text."""
    return [
        {"request": span.attributes.get("request"), "reply": _first_choice(span).get("text")}
        for span in split_evidence(trace).recorded
    ]


def reported_spans(trace: Sequence[Span]) -> list[dict[str, Any]]:
    """Each span the agent reported, for a reward server: as the agent sent it."""
    return [
        {
            "name": span.name,
            "status": span.status,
            "status_message": span.status_message,
            "attributes": span.attributes,
        }
        for span in split_evidence(trace).reported
    ]
