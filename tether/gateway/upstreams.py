"""Upstreams: where a model call goes. The built-in engine (in process) or any OpenAI-compatible server.

Every upstream returns, besides the OpenAI response for the agent, a `CallRecord` with the exact token
ids and logprobs it produced. When an upstream cannot give token ids (a hosted API), they are recorded
as absent: the gateway never re-tokenizes text to invent them.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import aiohttp
import orjson

from tether.engines.base import Engine, Generation, GenerationDone, SamplingParams
from tether.engines.tools import (
    ParsedOutput,
    ToolCallStream,
    ToolPlan,
    ToolRequestError,
    parse_tool_calls,
    plan_tools,
)
from tether.gateway.errors import GatewayError, UpstreamError

CallKind = Literal["chat", "completions"]
DEFAULT_MAX_TOKENS = 512


@dataclass
class ChoiceRecord:
    index: int
    text: str
    finish_reason: str | None
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    tool_parse_error: str | None = None  # the text looked like a tool call but could not be parsed


@dataclass
class CallRecord:
    """What an upstream reports about one call, for the span."""

    response: dict[str, Any]
    choices: list[ChoiceRecord]
    prompt_token_ids: list[int] | None = None
    usage: dict[str, Any] = field(default_factory=dict)
    policy_version: int | None = None


class Upstream(Protocol):
    name: str
    policy_version: int | None

    async def call(self, kind: CallKind, body: dict[str, Any]) -> CallRecord: ...

    def stream(self, kind: CallKind, body: dict[str, Any]) -> AsyncIterator[bytes | CallRecord]:
        """Yield SSE event bytes for the agent (never the final `[DONE]`), then one CallRecord."""
        ...

    async def aclose(self) -> None: ...


def sse(payload: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(payload) + b"\n\n"


# -- the built-in engine ------------------------------------------------------------------------------


def _stop_list(stop: Any) -> list[str]:
    if stop is None:
        return []
    if isinstance(stop, str):
        return [stop]
    if isinstance(stop, list) and all(isinstance(item, str) for item in stop):
        return stop
    raise GatewayError(400, "'stop' must be a string or a list of strings", param="stop")


def _number(body: dict[str, Any], key: str, default: float, low: float, high: float) -> float:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise GatewayError(400, f"'{key}' must be a number between {low} and {high}", param=key)
    return float(value)


def sampling_params(body: dict[str, Any], prompt_len: int, context: int) -> SamplingParams:
    room = context - prompt_len
    if room <= 0:
        raise GatewayError(
            400,
            f"the prompt has {prompt_len} tokens; the model's context is {context} tokens",
            code="context_length_exceeded",
            param="messages",
        )
    requested = body.get("max_completion_tokens", body.get("max_tokens"))
    if requested is not None and (
        isinstance(requested, bool) or not isinstance(requested, int) or requested < 1
    ):
        raise GatewayError(400, "'max_tokens' must be a positive integer", param="max_tokens")
    max_tokens = min(requested or DEFAULT_MAX_TOKENS, room)
    seed = body.get("seed")
    if seed is not None and (
        isinstance(seed, bool) or not isinstance(seed, int) or not -(2**63) <= seed < 2**63
    ):
        # Out of 64 bits the engine cannot seed its generator, and would fail the whole batch.
        raise GatewayError(400, "'seed' must be a 64-bit integer", param="seed")
    return SamplingParams(
        max_tokens=max_tokens,
        temperature=_number(body, "temperature", 1.0, 0.0, 2.0),
        top_p=_number(body, "top_p", 1.0, 0.0, 1.0),
        stop=_stop_list(body.get("stop")),
        seed=seed,
    )


def _choice_count(body: dict[str, Any]) -> int:
    n = body.get("n", 1) or 1
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 16:
        raise GatewayError(400, "'n' must be an integer between 1 and 16", param="n")
    return n


def _stream_options(body: dict[str, Any]) -> dict[str, Any]:
    options = body.get("stream_options")
    if options is None:
        return {}
    if not isinstance(options, dict):
        raise GatewayError(400, "'stream_options' must be an object", param="stream_options")
    return options


def _wants_logprobs(kind: CallKind, body: dict[str, Any]) -> bool:
    value = body.get("logprobs")
    return bool(value) if kind == "chat" else value is not None and value is not False


class EngineUpstream:
    """The built-in engine, called in process: no HTTP hop, exact ids and policy logprobs."""

    def __init__(self, engine: Engine, name: str = "policy", max_context: int | None = None) -> None:
        self.engine = engine
        self.name = name
        self.max_context = max_context or int(getattr(engine, "max_context", 2048))

    @property
    def policy_version(self) -> int:
        return self.engine.policy_version

    def _prompt_ids(self, kind: CallKind, body: dict[str, Any], plan: ToolPlan) -> list[int]:
        if kind == "chat":
            messages = body.get("messages")
            if (
                not isinstance(messages, list)
                or not messages
                or not all(isinstance(m, dict) for m in messages)
            ):
                raise GatewayError(
                    400, "'messages' must be a non-empty list of message objects", param="messages"
                )
            try:
                return self.engine.chat_prompt_ids(messages, plan.tools or None, plan.tool_choice)
            except Exception as exc:  # the chat template (jinja) may raise anything on odd messages
                raise GatewayError(400, f"cannot render the messages: {exc}", param="messages") from exc
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
            prompt = prompt[0]
        if isinstance(prompt, str):
            return self.engine.encode(prompt)
        if (
            isinstance(prompt, list)
            and prompt
            and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt)
        ):
            return list(prompt)
        raise GatewayError(
            400, "'prompt' must be a string or a list of token ids (one prompt per request)", param="prompt"
        )

    def _prepare(
        self, kind: CallKind, body: dict[str, Any]
    ) -> tuple[list[int], list[SamplingParams], ToolPlan]:
        _stream_options(body)  # checked before generating, not when the stream ends
        plan = _tool_plan(kind, body)
        prompt_ids = self._prompt_ids(kind, body, plan)
        params = sampling_params(body, len(prompt_ids), self.max_context)
        n = _choice_count(body)
        per_choice = []
        for index in range(n):
            seed = None if params.seed is None else params.seed + index
            per_choice.append(
                SamplingParams(params.max_tokens, params.temperature, params.top_p, params.stop, seed)
            )
        return prompt_ids, per_choice, plan

    async def call(self, kind: CallKind, body: dict[str, Any]) -> CallRecord:
        prompt_ids, per_choice, plan = self._prepare(kind, body)
        try:
            results = await asyncio.gather(*(self.engine.generate(prompt_ids, p) for p in per_choice))
        except ValueError as exc:
            raise GatewayError(400, str(exc)) from exc
        choices = [
            ChoiceRecord(i, gen.text, gen.finish_reason, list(gen.token_ids), list(gen.logprobs))
            for i, (gen, _) in enumerate(results)
        ]
        parsed = [_parse_choice(choice, plan) for choice in choices]
        version = min(version for _, version in results)
        response = self._response(kind, body, prompt_ids, choices, parsed)
        return CallRecord(response, choices, prompt_ids, response["usage"], version)

    def _usage(self, prompt_ids: list[int], choices: list[ChoiceRecord]) -> dict[str, int]:
        completion = sum(len(c.token_ids or []) for c in choices)
        return {
            "prompt_tokens": len(prompt_ids),
            "completion_tokens": completion,
            "total_tokens": len(prompt_ids) + completion,
        }

    def _token_logprobs(self, kind: CallKind, choice: ChoiceRecord) -> dict[str, Any]:
        ids, values = choice.token_ids or [], choice.logprobs or []
        tokens = [self.engine.decode([token_id]) for token_id in ids]
        if kind == "chat":
            return {
                "content": [
                    {"token": tok, "logprob": lp, "bytes": list(tok.encode()), "top_logprobs": []}
                    for tok, lp in zip(tokens, values, strict=True)
                ]
            }
        offsets, position = [], 0
        for tok in tokens:
            offsets.append(position)
            position += len(tok)
        return {"tokens": tokens, "token_logprobs": values, "top_logprobs": None, "text_offset": offsets}

    def _response(
        self,
        kind: CallKind,
        body: dict[str, Any],
        prompt_ids: list[int],
        choices: list[ChoiceRecord],
        parsed: list[ParsedOutput | None],
    ) -> dict[str, Any]:
        wants_logprobs = _wants_logprobs(kind, body)
        wants_ids = bool(body.get("return_token_ids"))
        out_choices = []
        for choice, output in zip(choices, parsed, strict=True):
            if kind == "chat":
                item: dict[str, Any] = {
                    "index": choice.index,
                    "message": _message(choice, output),
                    "finish_reason": _finish_reason(choice, output),
                    "logprobs": self._token_logprobs(kind, choice) if wants_logprobs else None,
                }
            else:
                item = {
                    "index": choice.index,
                    "text": choice.text,
                    "finish_reason": choice.finish_reason,
                    "logprobs": self._token_logprobs(kind, choice) if wants_logprobs else None,
                }
            if wants_ids:
                item["token_ids"] = choice.token_ids
            out_choices.append(item)
        response: dict[str, Any] = {
            "id": ("chatcmpl-" if kind == "chat" else "cmpl-") + uuid.uuid4().hex[:24],
            "object": "chat.completion" if kind == "chat" else "text_completion",
            "created": int(time.time()),
            "model": body.get("model") or self.name,
            "choices": out_choices,
            "usage": self._usage(prompt_ids, choices),
        }
        if wants_ids:
            response["prompt_token_ids"] = prompt_ids
        return response

    async def stream(self, kind: CallKind, body: dict[str, Any]) -> AsyncIterator[bytes | CallRecord]:
        prompt_ids, per_choice, plan = self._prepare(kind, body)
        if len(per_choice) > 1:
            raise GatewayError(400, "streaming with n > 1 is not supported by the built-in engine", param="n")
        params = per_choice[0]
        chunk_id = ("chatcmpl-" if kind == "chat" else "cmpl-") + uuid.uuid4().hex[:24]
        created = int(time.time())
        model = body.get("model") or self.name
        wants_logprobs = _wants_logprobs(kind, body)
        wants_ids = bool(body.get("return_token_ids"))

        def chunk(delta_text: str | None, finish: str | None, token: tuple[int, float] | None) -> bytes:
            choice: dict[str, Any] = {"index": 0, "finish_reason": finish, "logprobs": None}
            if kind == "chat":
                choice["delta"] = {} if delta_text is None else {"content": delta_text}
            else:
                choice["text"] = delta_text or ""
            if token is not None and wants_logprobs:
                single = ChoiceRecord(0, "", None, [token[0]], [token[1]])
                choice["logprobs"] = self._token_logprobs(kind, single)
            if token is not None and wants_ids:
                choice["token_ids"] = [token[0]]
            return sse(envelope([choice]))

        def envelope(choices: list[dict[str, Any]]) -> dict[str, Any]:
            return {
                "id": chunk_id,
                "object": "chat.completion.chunk" if kind == "chat" else "text_completion",
                "created": created,
                "model": model,
                "choices": choices,
            }

        if kind == "chat":
            first: dict[str, Any] = {
                "id": chunk_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [
                    {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}
                ],
            }
            if wants_ids:
                first["prompt_token_ids"] = prompt_ids
            yield sse(first)
        generation: Generation | None = None
        version = self.engine.policy_version
        calls = ToolCallStream() if plan.active else None
        try:
            async for item in self.engine.stream(prompt_ids, params):
                if isinstance(item, GenerationDone):
                    generation, version = item.generation, item.policy_version
                elif calls is None:
                    yield chunk(item.text, None, (item.token_id, item.logprob))
                else:
                    # Tokens inside a buffered tool call get no chunk; they are in the record.
                    text = calls.feed(item.text)
                    if text or not calls.buffering:
                        yield chunk(text, None, (item.token_id, item.logprob))
        except ValueError as exc:
            raise GatewayError(400, str(exc)) from exc
        assert generation is not None
        record = ChoiceRecord(
            0,
            generation.text,
            generation.finish_reason,
            list(generation.token_ids),
            list(generation.logprobs),
        )
        output = _parse_choice(record, plan)
        if calls is not None and output is not None:
            for payload in _closing_deltas(calls, output):
                yield sse(envelope([{"index": 0, "delta": payload, "finish_reason": None, "logprobs": None}]))
        yield chunk(None, _finish_reason(record, output), None)
        usage = self._usage(prompt_ids, [record])
        if _stream_options(body).get("include_usage"):
            yield sse(
                {
                    "id": chunk_id,
                    "object": "chat.completion.chunk" if kind == "chat" else "text_completion",
                    "created": created,
                    "model": model,
                    "choices": [],
                    "usage": usage,
                }
            )
        response = self._response(kind, body, prompt_ids, [record], [output])
        yield CallRecord(response, [record], prompt_ids, usage, version)

    async def aclose(self) -> None:
        await self.engine.aclose()


def _tool_plan(kind: CallKind, body: dict[str, Any]) -> ToolPlan:
    if kind != "chat":
        return ToolPlan()
    try:
        return plan_tools(body.get("tools"), body.get("tool_choice"))
    except ToolRequestError as exc:
        raise GatewayError(400, str(exc), param=exc.param) from exc


def _parse_choice(choice: ChoiceRecord, plan: ToolPlan) -> ParsedOutput | None:
    """Tool calls in a choice's text, when the request offered tools; sets the record's parse error."""
    if not plan.active:
        return None
    output = parse_tool_calls(choice.text, plan.names)
    choice.tool_parse_error = output.error
    return output


def _message(choice: ChoiceRecord, output: ParsedOutput | None) -> dict[str, Any]:
    if output is None or not output.tool_calls:
        return {"role": "assistant", "content": choice.text}
    return {
        "role": "assistant",
        "content": output.content,
        "tool_calls": [call.openai() for call in output.tool_calls],
    }


def _finish_reason(choice: ChoiceRecord, output: ParsedOutput | None) -> str | None:
    # A generation cut by max_tokens stays "length", even if the calls before the cut parsed.
    if output is not None and output.tool_calls and choice.finish_reason == "stop":
        return "tool_calls"
    return choice.finish_reason


def _closing_deltas(calls: ToolCallStream, output: ParsedOutput) -> list[dict[str, Any]]:
    """The deltas that end a chat stream with tools: the rest of the content, then one per call."""
    deltas: list[dict[str, Any]] = []
    rest = calls.finish(output)
    if rest:
        deltas.append({"content": rest})
    for index, call in enumerate(output.tool_calls):
        deltas.append({"tool_calls": [{"index": index, **call.openai()}]})
    return deltas


# -- any OpenAI-compatible server ---------------------------------------------------------------------


@dataclass
class HTTPUpstreamConfig:
    name: str
    base_url: str
    api_key: str | None = None
    model: str | None = None  # model name sent upstream; default: the name the agent asked for
    request_token_ids: bool = False  # vLLM: ask for `return_token_ids`
    request_logprobs: bool = True
    timeout_s: float = 600.0
    max_retries: int = 3
    backoff_s: float = 0.25
    policy_version: int | None = None


RETRYABLE_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})
JSON_HEADERS = {"Content-Type": "application/json"}


def _logprob_values(kind: CallKind, logprobs: Any) -> list[float] | None:
    if not isinstance(logprobs, dict):
        return None
    if kind == "chat":
        content = logprobs.get("content")
        if isinstance(content, list):
            return [float(item.get("logprob", 0.0)) for item in content if isinstance(item, dict)]
        return None
    values = logprobs.get("token_logprobs")
    return [float(v) for v in values] if isinstance(values, list) else None


_INT_TYPES = frozenset({int, bool})


def _ints(value: Any) -> list[int] | None:
    if not isinstance(value, list):
        return None
    # The type test first: it runs in C, about twice as fast over the hundreds of ids of a call.
    if _INT_TYPES.issuperset(map(type, value)) or all(isinstance(v, int) for v in value):
        return list(value)
    return None


class HTTPUpstream:
    """Forwards calls to an OpenAI-compatible server, retrying transient failures with backoff."""

    def __init__(self, config: HTTPUpstreamConfig) -> None:
        self.config = config
        self.name = config.name
        self.policy_version = config.policy_version
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            headers = {"Authorization": f"Bearer {self.config.api_key}"} if self.config.api_key else {}
            self._session = aiohttp.ClientSession(
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=self.config.timeout_s),
                connector=aiohttp.TCPConnector(limit=0),
            )
        return self._session

    def _url(self, kind: CallKind) -> str:
        return self.config.base_url.rstrip("/") + ("/chat/completions" if kind == "chat" else "/completions")

    def _upstream_body(self, kind: CallKind, body: dict[str, Any]) -> dict[str, Any]:
        out = dict(body)
        if self.config.model:
            out["model"] = self.config.model
        if self.config.request_logprobs and not _wants_logprobs(kind, body):
            out["logprobs"] = True if kind == "chat" else 0
        if self.config.request_token_ids:
            out["return_token_ids"] = True
        if out.get("stream"):
            out["stream_options"] = {**_stream_options(body), "include_usage": True}
        return out

    async def _post(self, kind: CallKind, body: dict[str, Any]) -> aiohttp.ClientResponse:
        """POST with retries; returns an open 2xx response, or raises UpstreamError."""
        payload = orjson.dumps(self._upstream_body(kind, body))
        last_error = ""
        for attempt in range(self.config.max_retries + 1):
            if attempt:
                await asyncio.sleep(self.config.backoff_s * 2 ** (attempt - 1))
            try:
                response = await self._client().post(self._url(kind), data=payload, headers=JSON_HEADERS)
            except (aiohttp.ClientError, TimeoutError) as exc:
                last_error = f"{type(exc).__name__}: {exc}".rstrip(": ")
                continue
            if response.status < 400:
                return response
            text = await response.text()
            response.release()
            if response.status not in RETRYABLE_STATUS:
                raise UpstreamError(
                    response.status, self._error_message(response.status, text), upstream_body=text
                )
            last_error = f"HTTP {response.status}: {text[:300]}"
        raise UpstreamError(
            502,
            f"upstream '{self.name}' failed after {self.config.max_retries + 1} attempts: {last_error}",
            code="upstream_unavailable",
        )

    def _error_message(self, status: int, text: str) -> str:
        try:
            message = orjson.loads(text)["error"]["message"]
        except (orjson.JSONDecodeError, KeyError, TypeError):
            message = text[:500]
        return f"upstream '{self.name}' rejected the request (HTTP {status}): {message}"

    def _strip(self, kind: CallKind, body: dict[str, Any], response: dict[str, Any]) -> dict[str, Any]:
        """Remove what the gateway asked for and the agent did not, so the agent sees what it asked for."""
        wants_logprobs = _wants_logprobs(kind, body)
        wants_ids = bool(body.get("return_token_ids"))
        if not wants_ids:
            response.pop("prompt_token_ids", None)
        for choice in response.get("choices") or []:
            if not wants_logprobs and "logprobs" in choice:
                choice["logprobs"] = None
            if not wants_ids:
                choice.pop("token_ids", None)
                choice.pop("prompt_token_ids", None)
        return response

    async def call(self, kind: CallKind, body: dict[str, Any]) -> CallRecord:
        response = await self._post(kind, body)
        try:
            raw = await response.read()
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise UpstreamError(502, f"upstream '{self.name}' broke off its answer: {exc}") from exc
        finally:
            response.release()
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise UpstreamError(502, f"upstream '{self.name}' answered with invalid JSON") from exc
        choices = []
        prompt_ids = _ints(data.get("prompt_token_ids"))
        for position, choice in enumerate(data.get("choices") or []):
            prompt_ids = prompt_ids or _ints(choice.get("prompt_token_ids"))
            text = (choice.get("message") or {}).get("content") if kind == "chat" else choice.get("text")
            choices.append(
                ChoiceRecord(
                    index=choice.get("index", position),
                    text=text or "",
                    finish_reason=choice.get("finish_reason"),
                    token_ids=_ints(choice.get("token_ids")),
                    logprobs=_logprob_values(kind, choice.get("logprobs")),
                )
            )
        usage = data.get("usage") or {}
        return CallRecord(self._strip(kind, body, data), choices, prompt_ids, usage, self.policy_version)

    async def stream(self, kind: CallKind, body: dict[str, Any]) -> AsyncIterator[bytes | CallRecord]:
        response = await self._post(kind, body)
        acc = _StreamAccumulator(kind)
        wants_usage = bool(_stream_options(body).get("include_usage"))
        try:
            async for data in _sse_events(response):
                if data == b"[DONE]":
                    break
                try:
                    chunk = orjson.loads(data)
                except orjson.JSONDecodeError:
                    continue
                acc.add(chunk)
                if chunk.get("usage") and not chunk.get("choices") and not wants_usage:
                    continue
                if not wants_usage:
                    chunk.pop("usage", None)
                yield sse(self._strip(kind, body, chunk))
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise UpstreamError(502, f"upstream '{self.name}' broke off its stream: {exc}") from exc
        finally:
            response.release()
        yield acc.record(self.policy_version)

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()


async def _sse_events(response: aiohttp.ClientResponse) -> AsyncIterator[bytes]:
    buffer = b""
    async for piece in response.content.iter_any():
        buffer += piece
        while b"\n\n" in buffer:
            event, buffer = buffer.split(b"\n\n", 1)
            for line in event.split(b"\n"):
                if line.startswith(b"data:"):
                    yield line[5:].strip()


class _StreamAccumulator:
    """Rebuilds the whole call from stream chunks: text, token ids and logprobs per choice."""

    def __init__(self, kind: CallKind) -> None:
        self.kind = kind
        self.prompt_ids: list[int] | None = None
        self.texts: dict[int, list[str]] = {}
        self.ids: dict[int, list[int] | None] = {}
        self.logprobs: dict[int, list[float] | None] = {}
        self.finish: dict[int, str | None] = {}
        self.tool_calls: dict[int, dict[int, dict[str, Any]]] = {}  # choice -> call index -> call
        self.usage: dict[str, Any] = {}
        self.meta: dict[str, Any] = {}

    def add(self, chunk: dict[str, Any]) -> None:
        for key in ("id", "model", "created"):
            self.meta.setdefault(key, chunk.get(key))
        self.prompt_ids = self.prompt_ids or _ints(chunk.get("prompt_token_ids"))
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        for choice in chunk.get("choices") or []:
            index = choice.get("index", 0)
            self.prompt_ids = self.prompt_ids or _ints(choice.get("prompt_token_ids"))
            delta = choice.get("delta") or {}
            text = delta.get("content") if self.kind == "chat" else choice.get("text")
            self.texts.setdefault(index, []).append(text or "")
            for piece in delta.get("tool_calls") or []:
                self._add_tool_call(index, piece)
            self._extend(self.ids, index, _ints(choice.get("token_ids")))
            self._extend(self.logprobs, index, _logprob_values(self.kind, choice.get("logprobs")))
            if choice.get("finish_reason"):
                self.finish[index] = choice["finish_reason"]

    def _add_tool_call(self, choice: int, piece: dict[str, Any]) -> None:
        """Stream chunks carry a tool call in pieces: id, type and name once, arguments in fragments."""
        calls = self.tool_calls.setdefault(choice, {})
        call = calls.setdefault(
            piece.get("index", len(calls)),
            {"id": None, "type": "function", "function": {"name": "", "arguments": ""}},
        )
        if piece.get("id"):
            call["id"] = piece["id"]
        if piece.get("type"):
            call["type"] = piece["type"]
        function = piece.get("function") or {}
        call["function"]["name"] += function.get("name") or ""
        call["function"]["arguments"] += function.get("arguments") or ""

    def _message(self, choice: ChoiceRecord) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": choice.text}
        calls = self.tool_calls.get(choice.index)
        if calls:
            message["content"] = choice.text or None
            message["tool_calls"] = [calls[position] for position in sorted(calls)]
        return message

    @staticmethod
    def _extend(target: dict[int, Any], index: int, values: list[Any] | None) -> None:
        if values is None:
            target.setdefault(index, None)
            return
        current = target.get(index)
        target[index] = (current or []) + values

    def record(self, policy_version: int | None) -> CallRecord:
        choices = [
            ChoiceRecord(
                index,
                "".join(parts),
                self.finish.get(index),
                self.ids.get(index) or None,
                self.logprobs.get(index) or None,
            )
            for index, parts in sorted(self.texts.items())
        ]
        response = {
            **self.meta,
            "object": "chat.completion" if self.kind == "chat" else "text_completion",
            "choices": [
                {
                    "index": c.index,
                    "finish_reason": c.finish_reason,
                    **({"message": self._message(c)} if self.kind == "chat" else {"text": c.text}),
                }
                for c in choices
            ],
            "usage": self.usage,
        }
        return CallRecord(response, choices, self.prompt_ids, self.usage, policy_version)
