"""Tool calls in the built-in engine: the fallback prompt format, parsing and the streaming filter."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from transformers import AutoTokenizer

from tether.engines.transformers_engine import TransformersEngine
from tether.models.tools import (
    CLOSE,
    OPEN,
    ToolCallStream,
    ToolRequestError,
    parse_tool_calls,
    plan_tools,
    prepare_messages,
    render_tool_call,
    template_supports_tools,
)

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}
TOOLS = [WEATHER, TIME]
NAMES = frozenset({"get_weather", "get_time"})
HISTORY: list[dict[str, Any]] = [
    {"role": "user", "content": "Weather and time in Paris?"},
    {
        "role": "assistant",
        "content": "Checking.",
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            },
            {
                "id": "call_2",
                "type": "function",
                "function": {"name": "get_time", "arguments": {"tz": "CET"}},
            },
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    {"role": "tool", "tool_call_id": "call_2", "content": [{"type": "text", "text": "10:00"}]},
]

# A small template of our own that renders tools, as Qwen- or Hermes-style templates do.
NATIVE_TEMPLATE = (
    "{% if tools %}<|im_start|>system\nTOOLS:{% for t in tools %}{{ t.function.name }};{% endfor %}"
    "<|im_end|>\n{% endif %}{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}"
    "{% for c in m.tool_calls or [] %}[CALL {{ c.function.name }} {{ c.function.arguments | tojson }}]"
    "{% endfor %}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def rendered_text(engine: TransformersEngine, messages: list[dict[str, Any]], **kwargs: Any) -> str:
    return engine.tokenizer.decode(engine.chat_prompt_ids(messages, **kwargs))


# -- the request ---------------------------------------------------------------------------------------


def test_plan_reads_tool_choice() -> None:
    assert plan_tools(TOOLS, None).active and plan_tools(TOOLS, "auto").choice == "auto"
    assert plan_tools(None, None).active is False
    none = plan_tools(TOOLS, "none")
    assert not none.active and none.tool_choice is None
    assert plan_tools(TOOLS, "required").tool_choice == "required"
    named = plan_tools(TOOLS, {"type": "function", "function": {"name": "get_time"}})
    assert named.forced == "get_time" and named.names == NAMES
    assert named.tool_choice == {"type": "function", "function": {"name": "get_time"}}


@pytest.mark.parametrize(
    ("tools", "choice", "param"),
    [
        ({"name": "f"}, None, "tools"),
        ([{"type": "retrieval"}], None, "tools"),
        ([{"type": "function", "function": {"description": "no name"}}], None, "tools"),
        (TOOLS, "always", "tool_choice"),
        (TOOLS, {"type": "function", "function": {"name": "nope"}}, "tool_choice"),
        (None, "required", "tool_choice"),
    ],
)
def test_bad_tools_and_tool_choice_name_their_field(tools: Any, choice: Any, param: str) -> None:
    with pytest.raises(ToolRequestError) as raised:
        plan_tools(tools, choice)
    assert raised.value.param == param


# -- rendering ------------------------------------------------------------------------------------------


def test_template_support_is_detected() -> None:
    assert template_supports_tools(NATIVE_TEMPLATE)
    assert template_supports_tools({"default": "x", "tool_use": NATIVE_TEMPLATE})
    assert not template_supports_tools("{% for m in messages %}{{ m.content }}{% endfor %}")
    assert not template_supports_tools(None)


def test_fallback_puts_tools_in_a_new_system_message(engine: TransformersEngine) -> None:
    assert not template_supports_tools(engine.tokenizer.chat_template)
    text = rendered_text(engine, [{"role": "user", "content": "hi"}], tools=TOOLS)
    system = text.split("<|im_end|>")[0]
    assert system.startswith("<|im_start|>system\n# Tools")
    assert json.dumps(WEATHER) in system and json.dumps(TIME) in system
    assert OPEN in system and CLOSE in system
    assert "SmolLM" not in text  # our system message replaces the template's default one
    assert text.endswith("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")


def test_fallback_appends_to_the_first_system_message() -> None:
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    prepared = prepare_messages(messages, TOOLS)
    assert len(prepared) == 2
    assert prepared[0]["content"].startswith("Be brief.\n\n# Tools\n")
    assert prepared[1] == messages[1]


def test_fallback_history_renders_calls_and_responses(engine: TransformersEngine) -> None:
    prepared = prepare_messages(HISTORY, TOOLS)
    assert [m["role"] for m in prepared] == ["system", "user", "assistant", "user"]
    weather = render_tool_call("get_weather", '{"city": "Paris"}')
    assert weather == f'{OPEN}\n{{"name": "get_weather", "arguments": {{"city": "Paris"}}}}\n{CLOSE}'
    time_call = render_tool_call("get_time", {"tz": "CET"})
    assert prepared[2] == {"role": "assistant", "content": f"Checking.\n{weather}\n{time_call}"}
    expected = "<tool_response>\nsunny\n</tool_response>\n<tool_response>\n10:00\n</tool_response>"
    assert prepared[3] == {"role": "user", "content": expected}
    text = rendered_text(engine, HISTORY, tools=TOOLS)
    assert f"<|im_start|>assistant\nChecking.\n{weather}" in text and expected in text


def test_rendered_call_parses_back() -> None:
    text = render_tool_call("get_weather", '{"city": "Paris"}') + "\n" + render_tool_call("get_time", None)
    parsed = parse_tool_calls(text, NAMES)
    assert parsed.error is None and parsed.content is None
    assert [(c.name, json.loads(c.arguments)) for c in parsed.tool_calls] == [
        ("get_weather", {"city": "Paris"}),
        ("get_time", {}),
    ]


def test_history_without_tools_still_renders_in_the_fallback(engine: TransformersEngine) -> None:
    text = rendered_text(engine, HISTORY)
    assert "# Tools" not in text and "SmolLM" in text
    assert f"{OPEN}\n" in text and "<|im_start|>user\n<tool_response>\nsunny" in text


def test_tool_choice_adds_an_instruction(engine: TransformersEngine) -> None:
    messages = [{"role": "user", "content": "hi"}]
    required = rendered_text(engine, messages, tools=TOOLS, tool_choice="required")
    named = rendered_text(
        engine, messages, tools=TOOLS, tool_choice={"type": "function", "function": {"name": "get_time"}}
    )
    assert "must call at least one" in required
    assert "must call the function get_time" in named
    assert "must call" not in rendered_text(engine, messages, tools=TOOLS)


def test_native_template_gets_the_tools_and_object_arguments(tiny_path: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(tiny_path)
    tokenizer.chat_template = NATIVE_TEMPLATE
    native = object.__new__(TransformersEngine)  # only the tokenizer is needed to render
    native.tokenizer = tokenizer
    text = tokenizer.decode(native.chat_prompt_ids(HISTORY, TOOLS))
    assert text.startswith("<|im_start|>system\nTOOLS:get_weather;get_time;<|im_end|>")
    assert '[CALL get_weather {"city": "Paris"}]' in text  # a JSON-string argument decoded, not re-quoted
    assert "<|im_start|>tool\nsunny<|im_end|>" in text and "# Tools" not in text


def test_malformed_history_call_is_a_value_error() -> None:
    bad = [{"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {}}]}]
    with pytest.raises(ValueError, match="function.name"):
        prepare_messages(bad, TOOLS)


# -- parsing --------------------------------------------------------------------------------------------


def test_text_around_calls_becomes_content() -> None:
    text = (
        'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>\n'
        '<tool_call>{"name": "get_time", "arguments": "{\\"tz\\": \\"CET\\"}"}</tool_call>\nOne moment.'
    )
    parsed = parse_tool_calls(text, NAMES)
    assert parsed.error is None
    assert parsed.content == "Let me check.\nOne moment."
    assert [c.name for c in parsed.tool_calls] == ["get_weather", "get_time"]
    assert json.loads(parsed.tool_calls[1].arguments) == {"tz": "CET"}  # arguments given as a string
    first = parsed.tool_calls[0].openai()
    assert first["id"].startswith("call_") and first["id"] != parsed.tool_calls[1].id
    assert first["type"] == "function" and json.loads(first["function"]["arguments"]) == {"city": "Oslo"}


def test_text_without_calls_is_unchanged() -> None:
    for text in ("", "  plain answer \n", "a < b and </tool_call> alone"):
        parsed = parse_tool_calls(text, NAMES)
        assert (parsed.content, parsed.tool_calls, parsed.error) == (text, [], None)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ('<tool_call>{"name": "get_weather", "arguments": {"city": </tool_call>', "not valid JSON"),
        ('<tool_call>{"name": "launch", "arguments": {}}</tool_call>', "unknown tool 'launch'"),
        ('ok <tool_call>{"name": "get_time", "arguments": {}}', "unclosed"),
        ('<tool_call>{"name": "get_time", "arguments": "{oops"}</tool_call>', "arguments that are not valid"),
        ('<tool_call>{"name": "get_time", "arguments": [1]}</tool_call>', "JSON object"),
        ('<tool_call>["get_time"]</tool_call>', '"name"'),
        (
            '<tool_call>{"name": "get_time"}</tool_call><tool_call>{"name": "x"}</tool_call>',
            "tool call 1 names unknown",
        ),
    ],
)
def test_malformed_calls_leave_the_text_as_content(text: str, reason: str) -> None:
    parsed = parse_tool_calls(text, NAMES)
    assert parsed.content == text and parsed.tool_calls == []
    assert parsed.error is not None and reason in parsed.error


# -- streaming ------------------------------------------------------------------------------------------


def stream_pieces(pieces: list[str]) -> tuple[list[str], ToolCallStream]:
    calls = ToolCallStream()
    return [calls.feed(piece) for piece in pieces], calls


def test_stream_holds_back_a_possible_call_then_buffers_it() -> None:
    pieces = ["Sure", ".", "\n", "<", "tool", "_call", ">", '{"name": "get_time"}', "</tool_call>", " bye"]
    sent, calls = stream_pieces(pieces)
    assert sent == ["Sure", ".", "", "", "", "", "", "", "", ""]
    assert calls.buffering
    parsed = parse_tool_calls("".join(pieces), NAMES)
    assert parsed.content == "Sure.\nbye"
    assert calls.finish(parsed) == "\nbye"


def test_stream_releases_text_that_was_not_a_call() -> None:
    pieces = ["a ", "<", "tool", "box> ", "b", " "]
    sent, calls = stream_pieces(pieces)
    assert not calls.buffering
    assert "".join(sent) == "a <toolbox> b"
    text = "".join(pieces)
    assert "".join(sent) + calls.finish(parse_tool_calls(text, NAMES)) == text


def test_stream_gives_the_whole_text_back_when_the_call_is_malformed() -> None:
    pieces = ["I think ", "<tool_call>", "{broken", "</tool_call>"]
    sent, calls = stream_pieces(pieces)
    parsed = parse_tool_calls("".join(pieces), NAMES)
    assert parsed.error is not None
    assert "".join(sent) + calls.finish(parsed) == "".join(pieces)
