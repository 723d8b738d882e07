"""The built-in engine as an upstream, called in process: no HTTP hop, exact ids and policy logprobs."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncGenerator
from dataclasses import replace
from typing import Any

from tether.engines.base import DEFAULT_POLICY, Engine, Generation, GenerationDone, SamplingParams
from tether.gateway.errors import GatewayError
from tether.gateway.upstreams.base import (
    CallKind,
    CallRecord,
    ChoiceRecord,
    stream_options,
    wants_logprobs,
)
from tether.gateway.upstreams.sse import sse
from tether.models.reasoning import StreamSplitter, is_reasoning_template, opens_thinking, split_reasoning
from tether.models.tools import (
    ParsedOutput,
    ToolCallStream,
    ToolPlan,
    ToolRequestError,
    parse_tool_calls,
    plan_tools,
)
from tether.sampling import unreproducible_parameters

DEFAULT_MAX_TOKENS = 512


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


def _refuse_unsupported_sampling(body: dict[str, Any]) -> None:
    """The engine draws from temperature, top-p and top-k only. A parameter that would reshape the
    distribution further (a penalty, a logit bias, min-p, ...) is refused by name rather than ignored:
    ignored, the agent would get answers it did not ask for; the recorded logprobs would still be exact,
    but no learner could reproduce the distribution the agent asked for either (`tether.sampling`)."""
    unsupported = unreproducible_parameters(body)
    if unsupported:
        raise GatewayError(
            400,
            f"the built-in engine samples with temperature, top_p and top_k only and cannot apply "
            f"{', '.join(unsupported)}: leave {'it' if len(unsupported) == 1 else 'them'} out or send "
            "the neutral value (an RL learner could not reproduce it either)",
            param=unsupported[0].partition("=")[0],
        )


def _refuse_constrained_output(body: dict[str, Any]) -> None:
    """`response_format` json_object or json_schema asks for decoding constrained to JSON: a mask over the
    vocabulary at every token. The engine does not apply one, and answering in free text would look like
    compliance; a mask is also a reshaped distribution that no learner could reproduce from the recorded
    call. So it is refused by name, as other reshaping is (type "text" is the unconstrained default)."""
    response_format = body.get("response_format")
    kind = response_format.get("type") if isinstance(response_format, dict) else response_format
    if response_format is not None and kind != "text":
        raise GatewayError(
            400,
            f"the built-in engine does not constrain its output to JSON (response_format {kind!r}): leave "
            "response_format out and ask for JSON in the prompt, or serve the policy with vLLM "
            "(--policy-server vllm)",
            param="response_format",
        )


def _refuse_non_text(messages: list[dict[str, Any]], model: str) -> None:
    """Content parts other than text (an image, audio, a file) are refused by name: the built-in engine's
    models read text only, and dropping the part would answer as if the model had seen it."""
    for index, message in enumerate(messages):
        content = message.get("content")
        for part in content if isinstance(content, list) else ():
            kind = part.get("type", "text") if isinstance(part, dict) else "text"
            if kind != "text":
                raise GatewayError(
                    400,
                    f"the built-in engine's model ({model}) reads text only, and message {index} has a "
                    f"{kind!r} part: send text, or serve a model that takes it (--upstream, or vLLM)",
                    param=f"messages[{index}].content",
                )


def sampling_params(body: dict[str, Any], prompt_len: int, context: int) -> SamplingParams:
    _refuse_unsupported_sampling(body)
    _refuse_constrained_output(body)
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
        top_k=_top_k(body),
    )


def _top_k(body: dict[str, Any]) -> int:
    """`top_k` (a vLLM extension of the OpenAI API): 0 or -1 mean no cut."""
    value = body.get("top_k")
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < -1:
        raise GatewayError(400, "'top_k' must be -1, 0 (no cut) or a positive integer", param="top_k")
    return max(value, 0)


def _wants_prompt_logprobs(kind: CallKind, body: dict[str, Any]) -> bool:
    """`prompt_logprobs` (vLLM's extension of completions): the built-in engine answers 0, each prompt
    token's own logprob, which is what a distillation teacher is asked for."""
    value = body.get("prompt_logprobs")
    if value is None:
        return False
    if kind != "completions":
        raise GatewayError(400, "'prompt_logprobs' is a completions parameter", param="prompt_logprobs")
    if isinstance(value, bool) or value != 0:
        raise GatewayError(
            400,
            "'prompt_logprobs' must be 0 with the built-in engine (each prompt token's own logprob; "
            "no alternatives)",
            param="prompt_logprobs",
        )
    return True


def _choice_count(body: dict[str, Any]) -> int:
    n = body.get("n", 1) or 1
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 16:
        raise GatewayError(400, "'n' must be an integer between 1 and 16", param="n")
    return n


class EngineUpstream:
    """The built-in engine, called in process: no HTTP hop, exact ids and policy logprobs."""

    def __init__(
        self,
        engine: Engine,
        name: str = "policy",
        max_context: int | None = None,
        *,
        policy: str = DEFAULT_POLICY,
        closes_engine: bool = True,
    ) -> None:
        """`policy`: the engine's adapter its calls sample from. Several upstreams may share one engine,
        one per policy; only the one with `closes_engine` stops it."""
        self.engine = engine
        self.name = name
        self.policy = policy
        self.closes_engine = closes_engine
        self.max_context = max_context or engine.max_context

    @property
    def policy_version(self) -> int:
        return self.engine.version_of(self.policy)

    def _thinking(self, kind: CallKind, prompt_ids: list[int]) -> bool | None:
        """For a chat call of a reasoning model: whether its prompt already opened `<think>` (False: the
        model opens it, if it thinks). None: not a reasoning model's chat call, nothing to split."""
        tokenizer = getattr(self.engine, "tokenizer", None)
        if kind != "chat" or not is_reasoning_template(getattr(tokenizer, "chat_template", None)):
            return None
        return opens_thinking(self.engine.decode(prompt_ids[-8:]))

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
            _refuse_non_text(messages, str(getattr(self.engine, "name", self.name)))
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
        stream_options(body)  # checked before generating, not when the stream ends
        plan = _tool_plan(kind, body)
        prompt_ids = self._prompt_ids(kind, body, plan)
        params = sampling_params(body, len(prompt_ids), self.max_context)
        per_choice = [
            replace(params, seed=None if params.seed is None else params.seed + index)
            for index in range(_choice_count(body))
        ]
        return prompt_ids, per_choice, plan

    async def call(self, kind: CallKind, body: dict[str, Any], *, owner: str | None = None) -> CallRecord:
        prompt_ids, per_choice, plan = self._prepare(kind, body)
        scored = _wants_prompt_logprobs(kind, body)
        generations = (
            self.engine.generate(prompt_ids, p, owner=owner, policy=self.policy) for p in per_choice
        )
        try:
            results = await asyncio.gather(*generations)
            prompt_logprobs = await self._prompt_logprobs(prompt_ids) if scored else None
        except ValueError as exc:
            raise GatewayError(400, str(exc)) from exc
        choices = [
            ChoiceRecord(i, gen.text, gen.finish_reason, list(gen.token_ids), list(gen.logprobs))
            for i, (gen, _) in enumerate(results)
        ]
        thinking = self._thinking(kind, prompt_ids)
        parsed = [_parse_choice(choice, plan, thinking) for choice in choices]
        version = min(version for _, version in results)
        response = self._response(kind, body, prompt_ids, choices, parsed, thinking)
        if prompt_logprobs is not None:
            for item in response["choices"]:
                item["prompt_logprobs"] = prompt_logprobs
        return CallRecord(response, choices, prompt_ids, response["usage"], version, per_choice[0].sampler)

    async def _prompt_logprobs(self, prompt_ids: list[int]) -> list[dict[str, dict[str, Any]] | None]:
        """vLLM's `prompt_logprobs` answer with 0 alternatives: per prompt position, the logprob of the
        token there given those before it (None for the first), keyed by the token id."""
        values = await self.engine.score(prompt_ids, self.policy)
        entries: list[dict[str, dict[str, Any]] | None] = [None]
        for token_id, logprob in zip(prompt_ids[1:], values, strict=True):
            decoded = self.engine.decode([token_id])
            entries.append({str(token_id): {"logprob": logprob, "rank": None, "decoded_token": decoded}})
        return entries

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
        thinking: bool | None = None,
    ) -> dict[str, Any]:
        with_logprobs = wants_logprobs(kind, body)
        wants_ids = bool(body.get("return_token_ids"))
        out_choices = []
        for choice, output in zip(choices, parsed, strict=True):
            if kind == "chat":
                answer: dict[str, Any] = {
                    "message": _message(choice, output, thinking),
                    "finish_reason": _finish_reason(choice, output),
                }
            else:
                answer = {"text": choice.text, "finish_reason": choice.finish_reason}
            item: dict[str, Any] = {
                "index": choice.index,
                **answer,
                "logprobs": self._token_logprobs(kind, choice) if with_logprobs else None,
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

    async def stream(
        self, kind: CallKind, body: dict[str, Any], *, owner: str | None = None
    ) -> AsyncGenerator[bytes | CallRecord, None]:
        if _wants_prompt_logprobs(kind, body):
            raise GatewayError(400, "'prompt_logprobs' needs a call without streaming", param="stream")
        prompt_ids, per_choice, plan = self._prepare(kind, body)
        if len(per_choice) > 1:
            raise GatewayError(400, "streaming with n > 1 is not supported by the built-in engine", param="n")
        params = per_choice[0]
        chunk_id = ("chatcmpl-" if kind == "chat" else "cmpl-") + uuid.uuid4().hex[:24]
        created = int(time.time())
        model = body.get("model") or self.name
        with_logprobs = wants_logprobs(kind, body)
        wants_ids = bool(body.get("return_token_ids"))

        thinking = self._thinking(kind, prompt_ids)
        splitter = StreamSplitter(thinking) if thinking is not None else None

        def chunk(
            delta_text: str | None,
            finish: str | None,
            token: tuple[int, float] | None,
            reasoning: str = "",
        ) -> bytes:
            choice: dict[str, Any] = {"index": 0, "finish_reason": finish, "logprobs": None}
            if kind == "chat":
                delta = {} if delta_text is None else {"content": delta_text}
                choice["delta"] = {"reasoning_content": reasoning, **delta} if reasoning else delta
            else:
                choice["text"] = delta_text or ""
            if token is not None and with_logprobs:
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
            first = envelope(
                [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]
            )
            if wants_ids:
                first["prompt_token_ids"] = prompt_ids
            yield sse(first)
        generation: Generation | None = None
        version = self.policy_version
        calls = ToolCallStream() if plan.active else None
        try:
            async for item in self.engine.stream(prompt_ids, params, owner=owner, policy=self.policy):
                if isinstance(item, GenerationDone):
                    generation, version = item.generation, item.policy_version
                elif splitter is not None and (splitter.state != "answer" or splitter.held):
                    reasoning, text = splitter.feed(item.text)
                    if text and calls is not None:
                        text = calls.feed(text)
                    yield chunk(text, None, (item.token_id, item.logprob), reasoning)
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
        if splitter is not None:
            reasoning, text = splitter.flush()
            if text and calls is not None:
                text = calls.feed(text)
            if reasoning or text:
                yield chunk(text, None, None, reasoning)
        record = ChoiceRecord(
            0,
            generation.text,
            generation.finish_reason,
            list(generation.token_ids),
            list(generation.logprobs),
        )
        output = _parse_choice(record, plan, thinking)
        if calls is not None and output is not None:
            for payload in _closing_deltas(calls, output):
                yield sse(envelope([{"index": 0, "delta": payload, "finish_reason": None, "logprobs": None}]))
        yield chunk(None, _finish_reason(record, output), None)
        usage = self._usage(prompt_ids, [record])
        if stream_options(body).get("include_usage"):
            yield sse(envelope([]) | {"usage": usage})
        response = self._response(kind, body, prompt_ids, [record], [output], thinking)
        yield CallRecord(response, [record], prompt_ids, usage, version, params.sampler)

    async def aclose(self) -> None:
        if self.closes_engine:
            await asyncio.to_thread(self.engine.close)  # it joins the engine's worker thread


def _tool_plan(kind: CallKind, body: dict[str, Any]) -> ToolPlan:
    if kind != "chat":
        return ToolPlan()
    try:
        return plan_tools(body.get("tools"), body.get("tool_choice"))
    except ToolRequestError as exc:
        raise GatewayError(400, str(exc), param=exc.param) from exc


def _answer_text(choice: ChoiceRecord, thinking: bool | None) -> tuple[str | None, str]:
    """A chat choice's thinking (None: none) and its answer's text."""
    if thinking is None:
        return None, choice.text
    split = split_reasoning(choice.text, opened=thinking)
    return split.reasoning, split.content


def _parse_choice(choice: ChoiceRecord, plan: ToolPlan, thinking: bool | None = None) -> ParsedOutput | None:
    """Tool calls in a choice's answer (never in its thinking), when the request offered tools; sets the
    record's parse error."""
    if not plan.active:
        return None
    output = parse_tool_calls(_answer_text(choice, thinking)[1], plan.names)
    choice.tool_parse_error = output.error
    return output


def _message(
    choice: ChoiceRecord, output: ParsedOutput | None, thinking: bool | None = None
) -> dict[str, Any]:
    reasoning, text = _answer_text(choice, thinking)
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    if output is not None and output.tool_calls:
        message["content"] = output.content
        message["tool_calls"] = [call.openai() for call in output.tool_calls]
    return message


def _finish_reason(choice: ChoiceRecord, output: ParsedOutput | None) -> str | None:
    # A generation cut by max_tokens stays "length", even if the calls before the cut parsed.
    if output is not None and output.tool_calls and choice.finish_reason == "stop":
        return "tool_calls"
    return choice.finish_reason


def _closing_deltas(calls: ToolCallStream, output: ParsedOutput) -> list[dict[str, Any]]:
    """The deltas that end a chat stream with tools: the rest of the content, then one per call."""
    rest = calls.finish(output)
    deltas: list[dict[str, Any]] = [{"content": rest}] if rest else []
    return deltas + [
        {"tool_calls": [{"index": i, **call.openai()}]} for i, call in enumerate(output.tool_calls)
    ]
