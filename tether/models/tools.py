"""Tool calls for the built-in engine: rendering tools into the prompt and parsing calls out of the text.

Models whose chat template supports tools (its source mentions `tools`, as Qwen's and Hermes' do) get
them through `apply_chat_template(..., tools=...)`. Every other template (SmolLM2-135M-Instruct's
ChatML, the tiny random test model's) gets the **fallback format**, which is plain text in the
messages themselves:

- The tools go into a system-prompt section, appended to the first system (or developer) message,
  or put in a new system message at the start (which replaces a template's default system prompt).
  The section lists each tool as one JSON object per line between `<tools>` and `</tools>` and asks
  for calls in this form, one block per call, several blocks allowed::

      <tool_call>
      {"name": "get_weather", "arguments": {"city": "Paris"}}
      </tool_call>

- An earlier assistant message with `tool_calls` renders as its content (if any), a newline, then one
  such block per call (arguments given as a JSON string are decoded to an object first).
- `tool` messages (the template has no tool role) render as a user turn holding one
  `<tool_response>\\n...\\n</tool_response>` block per message; consecutive tool messages share a turn.

`tool_choice`: `none` renders no tools and parses nothing; `auto` (the default) renders and parses;
`required` and a named function add one sentence to the system prompt asking for a call (of that
function). Decoding is not constrained, so the model may still answer without one.

Parsing (`parse_tool_calls`) accepts `<tool_call>` blocks whose body is a JSON object with `name` (one
of the request's tools) and `arguments` (an object, or a string holding a JSON object). The text outside
the blocks, trimmed next to them, is the message content (None if empty). Anything wrong (bad JSON, an
unknown name, an unclosed block) makes the whole text plain content, with the reason in `error`.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any

OPEN = "<tool_call>"
CLOSE = "</tool_call>"
_SYSTEM_ROLES = ("system", "developer")

FALLBACK_TOOLS_HEADER = (
    "# Tools\n\n"
    "You can call the functions described below, as JSON schemas, between <tools> and </tools>:\n"
    "<tools>\n"
)
FALLBACK_TOOLS_FOOTER = (
    "</tools>\n\n"
    "To call a function, answer with one block per call, each holding a JSON object with the function's "
    "name and its arguments:\n"
    f'{OPEN}\n{{"name": "<function name>", "arguments": {{<arguments as a JSON object>}}}}\n{CLOSE}'
)


class ToolRequestError(ValueError):
    """A malformed `tools` or `tool_choice`; `param` names the offending request field."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


@dataclass(frozen=True)
class ToolPlan:
    """What a request asks for: the tools to render and parse (empty: none), and how to choose."""

    tools: list[dict[str, Any]] = field(default_factory=list)
    choice: str = "auto"  # auto | required | none | function
    forced: str | None = None  # the function's name when choice == "function"

    @property
    def active(self) -> bool:
        return bool(self.tools)

    @property
    def names(self) -> frozenset[str]:
        return frozenset(tool["function"]["name"] for tool in self.tools)

    @property
    def tool_choice(self) -> Any:
        """The `tool_choice` the prompt renderer needs (None for auto)."""
        if self.choice == "required":
            return "required"
        if self.choice == "function":
            return {"type": "function", "function": {"name": self.forced}}
        return None


@dataclass
class ToolCall:
    name: str
    arguments: str  # a JSON object, as a string
    id: str = field(default_factory=lambda: "call_" + uuid.uuid4().hex[:24])

    def openai(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


@dataclass
class ParsedOutput:
    """A generated text split into message content and tool calls."""

    content: str | None
    tool_calls: list[ToolCall] = field(default_factory=list)
    error: str | None = None


# -- the request ---------------------------------------------------------------------------------------


def plan_tools(tools: Any, tool_choice: Any) -> ToolPlan:
    """Check `tools` and `tool_choice` of a chat request; raise ToolRequestError on bad input."""
    checked = _check_tools(tools)
    if tool_choice is None or tool_choice == "auto":
        return ToolPlan(checked)
    if tool_choice == "none":
        return ToolPlan([], "none")
    if tool_choice == "required":
        if not checked:
            raise ToolRequestError("'tool_choice' is 'required' but the request has no tools", "tool_choice")
        return ToolPlan(checked, "required")
    name = _forced_name(tool_choice)
    if name not in {tool["function"]["name"] for tool in checked}:
        raise ToolRequestError(f"'tool_choice' names '{name}', which is not in 'tools'", "tool_choice")
    return ToolPlan(checked, "function", name)


def _check_tools(tools: Any) -> list[dict[str, Any]]:
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise ToolRequestError("'tools' must be a list of function tools", "tools")
    for position, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(tool, dict) or tool.get("type", "function") != "function":
            raise ToolRequestError(f"tools[{position}] must be an object with type 'function'", "tools")
        if (
            not isinstance(function, dict)
            or not isinstance(function.get("name"), str)
            or not function["name"]
        ):
            raise ToolRequestError(f"tools[{position}].function.name must be a non-empty string", "tools")
    return list(tools)


def _forced_name(tool_choice: Any) -> str:
    function = tool_choice.get("function") if isinstance(tool_choice, dict) else None
    name = function.get("name") if isinstance(function, dict) else None
    if not isinstance(name, str) or tool_choice.get("type", "function") != "function":
        raise ToolRequestError(
            "'tool_choice' must be 'none', 'auto', 'required' or "
            '{"type": "function", "function": {"name": ...}}',
            "tool_choice",
        )
    return name


# -- rendering ------------------------------------------------------------------------------------------


def template_supports_tools(template: Any) -> bool:
    """Whether a tokenizer's chat template (a string, or a dict of named templates) renders tools."""
    if isinstance(template, dict):
        return any(template_supports_tools(source) for source in template.values())
    return isinstance(template, str) and "tools" in template


def content_text(content: Any) -> str:
    """A message's content as text: strings as is, the text parts of a list joined, None as empty."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(_part_text(part) for part in content)
    raise ValueError(f"message content must be a string or a list of parts, not {type(content).__name__}")


def _part_text(part: Any) -> str:
    if isinstance(part, str):
        return part
    if isinstance(part, dict) and part.get("type", "text") == "text":
        return str(part.get("text") or "")
    return ""


def prepare_messages(
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    tool_choice: Any = None,
    native: bool = False,
) -> list[dict[str, Any]]:
    """Messages ready for `apply_chat_template`: text content, and tools in the fallback format unless
    the template renders them itself (`native`)."""
    instruction = choice_instruction(tool_choice) if tools else None
    if native:
        prepared = [_native_message(m) for m in messages]
        return _add_to_system(prepared, instruction) if instruction else prepared
    prepared = _fallback_messages(messages)
    if tools:
        lines = "".join(json.dumps(tool_line(tool), ensure_ascii=False) + "\n" for tool in tools)
        section = FALLBACK_TOOLS_HEADER + lines + FALLBACK_TOOLS_FOOTER
        prepared = _add_to_system(prepared, f"{section}\n\n{instruction}" if instruction else section)
    return prepared


def choice_instruction(tool_choice: Any) -> str | None:
    if tool_choice == "required":
        return "In this answer you must call at least one of these functions."
    if isinstance(tool_choice, dict):
        name = (tool_choice.get("function") or {}).get("name")
        return f"In this answer you must call the function {name}."
    return None


def tool_line(tool: dict[str, Any]) -> dict[str, Any]:
    """A tool as its line shows it: type, then the function's name, description and parameters, those
    absent or null left out. A fixed shape, because vLLM hands templates its own parse of the request
    (nulls filled in): with it both engines render the same tokens (`chat_templates/chatml-tools.jinja`)."""
    function = tool["function"]
    fields = {k: function[k] for k in ("name", "description", "parameters") if function.get(k) is not None}
    return {"type": "function", "function": fields}


def render_tool_call(name: str, arguments: Any) -> str:
    """One call in the fallback format."""
    call = {"name": name, "arguments": _arguments_object(arguments)}
    return f"{OPEN}\n{json.dumps(call, ensure_ascii=False)}\n{CLOSE}"


def _arguments_object(arguments: Any) -> Any:
    """Arguments as an object where they decode to one; otherwise as given."""
    if isinstance(arguments, str):
        try:
            return json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError:
            return arguments
    return {} if arguments is None else arguments


def _call_function(call: Any) -> dict[str, Any]:
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise ValueError("each tool call in an assistant message needs function.name")
    return function


def _native_message(message: dict[str, Any]) -> dict[str, Any]:
    out = {**message, "content": content_text(message.get("content"))}
    if message.get("tool_calls"):
        out["tool_calls"] = [_native_call(call) for call in message["tool_calls"]]
    return out


def _native_call(call: Any) -> dict[str, Any]:
    # Templates expect the arguments as a mapping (they apply `tojson` or iterate over items).
    function = _call_function(call)
    arguments = _arguments_object(function.get("arguments"))
    return {**call, "type": "function", "function": {**function, "arguments": arguments}}


def _fallback_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    previous_role = None
    for message in messages:
        role = message.get("role")
        text = content_text(message.get("content"))
        if role == "tool":
            block = f"<tool_response>\n{text}\n</tool_response>"
            if previous_role == "tool":
                out[-1]["content"] += "\n" + block
            else:
                out.append({"role": "user", "content": block})
        else:
            if role == "assistant" and message.get("tool_calls"):
                blocks = _call_blocks(message["tool_calls"])
                text = "\n".join([text, *blocks] if text else blocks)
            plain = {k: v for k, v in message.items() if k not in ("tool_calls", "tool_call_id")}
            out.append({**plain, "content": text})
        previous_role = role
    return out


def _call_blocks(calls: Any) -> list[str]:
    if not isinstance(calls, list):
        raise ValueError("an assistant message's tool_calls must be a list")
    functions = [_call_function(call) for call in calls]
    return [render_tool_call(f["name"], f.get("arguments")) for f in functions]


def _add_to_system(messages: list[dict[str, Any]], section: str) -> list[dict[str, Any]]:
    if messages and messages[0].get("role") in _SYSTEM_ROLES:
        first = messages[0]
        joined = f"{first['content']}\n\n{section}" if first["content"] else section
        return [{**first, "content": joined}, *messages[1:]]
    return [{"role": "system", "content": section}, *messages]


# -- parsing --------------------------------------------------------------------------------------------


def parse_tool_calls(text: str, names: frozenset[str] | set[str]) -> ParsedOutput:
    """Split generated text into content and tool calls; on any malformed call, all of it is content."""
    if OPEN not in text:
        return ParsedOutput(text)
    try:
        calls, pieces = _blocks(text, names)
    except ValueError as exc:
        return ParsedOutput(text, error=str(exc))
    content = "\n".join(piece for piece in pieces if piece)
    return ParsedOutput(content or None, calls)


def _blocks(text: str, names: frozenset[str] | set[str]) -> tuple[list[ToolCall], list[str]]:
    calls: list[ToolCall] = []
    pieces: list[str] = []
    position = 0
    while (start := text.find(OPEN, position)) >= 0:
        end = text.find(CLOSE, start + len(OPEN))
        if end < 0:
            raise ValueError(f"unclosed {OPEN} block at character {start}")
        before = text[position:start]
        pieces.append((before.lstrip() if calls else before).rstrip())
        calls.append(_call(text[start + len(OPEN) : end], names, len(calls)))
        position = end + len(CLOSE)
    pieces.append(text[position:].lstrip())
    return calls, pieces


def _call(body: str, names: frozenset[str] | set[str], number: int) -> ToolCall:
    where = f"tool call {number}"
    try:
        data = json.loads(body)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{where} is not valid JSON: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("name"), str):
        raise ValueError(f'{where} must be a JSON object with a string "name"')
    if data["name"] not in names:
        offered = ", ".join(sorted(names)) or "none"
        raise ValueError(f"{where} names unknown tool '{data['name']}' (the request offers: {offered})")
    arguments = data.get("arguments", {})
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{where} has arguments that are not valid JSON: {exc}") from exc
    if not isinstance(arguments, dict):
        raise ValueError(f"{where} must have arguments that are a JSON object")
    return ToolCall(data["name"], json.dumps(arguments, ensure_ascii=False))


# -- streaming ------------------------------------------------------------------------------------------


class ToolCallStream:
    """Lets plain text through as it streams, and buffers from where a tool call could begin.

    Text that might be the start of `<tool_call>`, and trailing whitespace (trimmed before a call), is
    held back; once a block opens, everything up to the end is buffered. `finish` gives the content
    still to send once the whole text is parsed: what was sent is always a prefix of the final content.
    """

    def __init__(self) -> None:
        self.text = ""
        self.sent = 0
        self.buffering = False

    def feed(self, delta: str) -> str:
        self.text += delta
        if self.buffering:
            return ""
        start = self.text.find(OPEN, self.sent)
        if start >= 0:
            self.buffering = True
            safe = start
        else:
            safe = len(self.text) - _open_prefix_length(self.text)
        safe = max(self.sent, len(self.text[:safe].rstrip()))
        out = self.text[self.sent : safe]
        self.sent = safe
        return out

    def finish(self, parsed: ParsedOutput) -> str:
        sent = self.text[: self.sent]
        final = parsed.content or ""
        return final[len(sent) :] if final.startswith(sent) else ""


def _open_prefix_length(text: str) -> int:
    for k in range(min(len(OPEN) - 1, len(text)), 0, -1):
        if text.endswith(OPEN[:k]):
            return k
    return 0
