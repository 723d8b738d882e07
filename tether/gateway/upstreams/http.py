"""Any OpenAI-compatible server as an upstream (vLLM, SGLang, a hosted API), with retries and backoff."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from dataclasses import dataclass, replace
from typing import Any

import aiohttp
import orjson
from yarl import URL

from tether.gateway.errors import UpstreamError
from tether.gateway.upstreams.base import (
    CallKind,
    CallRecord,
    ChoiceRecord,
    int_list,
    logprob_values,
    stream_options,
    wants_logprobs,
)
from tether.gateway.upstreams.sse import StreamAborted, StreamAccumulator, sse, sse_events
from tether.sampling import Sampler, unreproducible_parameters


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
    # The server's logprobs are under the distribution it sampled from (vLLM started with
    # `--logprobs-mode processed_logprobs`, as managed replicas are): then calls at any temperature, top-p
    # and top-k record an exact behaviour policy. Otherwise only calls at the raw distribution do.
    processed_logprobs: bool = False


def _float(value: Any, default: float) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else default


RETRYABLE_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})


@dataclass(frozen=True)
class Target:
    """What a call is sent as: the model name upstream (None: the one the agent asked for) and the
    policy version its span records."""

    model: str | None
    policy_version: int | None


class HTTPUpstream:
    """Forwards calls to an OpenAI-compatible server, retrying transient failures with backoff."""

    def __init__(self, config: HTTPUpstreamConfig) -> None:
        self.config = config
        self.name = config.name
        self.target = Target(config.model, config.policy_version)
        base = config.base_url.rstrip("/")
        # Parsed once: aiohttp would parse a string URL on every call.
        self._urls = {"chat": URL(base + "/chat/completions"), "completions": URL(base + "/completions")}
        self._session: aiohttp.ClientSession | None = None

    @property
    def policy_version(self) -> int | None:
        return self.target.policy_version

    def retarget(self, model: str | None, policy_version: int | None) -> None:
        """Send the calls admitted from now on as `model`, recorded as `policy_version` (a policy server
        that loaded a new adapter under a new name); calls in flight keep the target they started with."""
        self.target = Target(model, policy_version)

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            headers = {"Content-Type": "application/json"}  # as session defaults: no merge per call
            if self.config.api_key:
                headers["Authorization"] = f"Bearer {self.config.api_key}"
            self._session = aiohttp.ClientSession(
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=self.config.timeout_s),
                connector=aiohttp.TCPConnector(limit=0),
            )
        return self._session

    def _upstream_body(self, kind: CallKind, body: dict[str, Any], model: str | None) -> dict[str, Any]:
        out = dict(body)
        if model:
            out["model"] = model
        if self.config.request_logprobs and not wants_logprobs(kind, body):
            out["logprobs"] = True if kind == "chat" else 0
        if self.config.request_token_ids:
            out["return_token_ids"] = True
        if out.get("stream"):
            out["stream_options"] = {**stream_options(body), "include_usage": True}
        return out

    async def _post(self, kind: CallKind, body: dict[str, Any], target: Target) -> aiohttp.ClientResponse:
        """POST with retries; returns an open 2xx response, or raises UpstreamError."""
        payload = orjson.dumps(self._upstream_body(kind, body, target.model))
        last_error = ""
        for attempt in range(self.config.max_retries + 1):
            if attempt:
                await asyncio.sleep(self.config.backoff_s * 2 ** (attempt - 1))
            try:
                response = await self._client().post(self._urls[kind], data=payload)
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
        keep_logprobs = wants_logprobs(kind, body)
        wants_ids = bool(body.get("return_token_ids"))
        if not wants_ids:
            response.pop("prompt_token_ids", None)
        for choice in response.get("choices") or []:
            if not keep_logprobs and "logprobs" in choice:
                choice["logprobs"] = None
            if not wants_ids:
                choice.pop("token_ids", None)
                choice.pop("prompt_token_ids", None)
        return response

    async def call(self, kind: CallKind, body: dict[str, Any], *, owner: str | None = None) -> CallRecord:
        # `owner` is not sent: an OpenAI-compatible server has no notion of rollouts to be fair across.
        target = self.target
        response = await self._post(kind, body, target)
        try:
            raw = await response.read()
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise UpstreamError(502, f"upstream '{self.name}' broke off its answer: {exc}") from exc
        finally:
            response.release()
        return self.record_of(kind, body, raw, target.policy_version)

    def record_of(
        self, kind: CallKind, body: dict[str, Any], raw: bytes, policy_version: int | None
    ) -> CallRecord:
        """The record of an answer, whose response is what the agent asked for (see `_strip`)."""
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise UpstreamError(502, f"upstream '{self.name}' answered with invalid JSON") from exc
        choices = []
        prompt_ids = int_list(data.get("prompt_token_ids"))
        for position, choice in enumerate(data.get("choices") or []):
            prompt_ids = prompt_ids or int_list(choice.get("prompt_token_ids"))
            text = (choice.get("message") or {}).get("content") if kind == "chat" else choice.get("text")
            choices.append(
                ChoiceRecord(
                    index=choice.get("index", position),
                    text=text or "",
                    finish_reason=choice.get("finish_reason"),
                    token_ids=int_list(choice.get("token_ids")),
                    logprobs=logprob_values(kind, choice.get("logprobs")),
                )
            )
        usage = data.get("usage") or {}
        sampler = self.sampler_of(body)
        return CallRecord(self._strip(kind, body, data), choices, prompt_ids, usage, policy_version, sampler)

    def sampler_of(self, body: dict[str, Any]) -> Sampler:
        """The distribution a call was sampled from, by the OpenAI defaults for what it leaves out (the
        server must not add defaults of its own: managed vLLM runs with `--generation-config vllm`).
        Parameters the server applies beyond temperature, top-p and top-k (penalties, logit bias, ...) are
        forwarded as asked and named on the sampler, which RL then refuses (`Sampler.rl_problem`)."""
        sampler = Sampler(
            temperature=_float(body.get("temperature"), 1.0),
            top_p=_float(body.get("top_p"), 1.0),
            top_k=max(int(body.get("top_k") or 0), 0) if isinstance(body.get("top_k"), int) else 0,
            unreproducible=unreproducible_parameters(body),
        )
        exact = self.config.processed_logprobs or not sampler.processed
        return sampler if exact else replace(sampler, exact=False)

    async def stream(
        self, kind: CallKind, body: dict[str, Any], *, owner: str | None = None
    ) -> AsyncGenerator[bytes | CallRecord, None]:
        target = self.target
        response = await self._post(kind, body, target)
        acc = StreamAccumulator(kind)
        wants_usage = bool(stream_options(body).get("include_usage"))
        try:
            async for data in sse_events(response.content.iter_any()):
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
                try:
                    yield sse(self._strip(kind, body, chunk))
                except StreamAborted:
                    response.close()  # the upstream sees its client go away, and stops generating
                    break
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise UpstreamError(502, f"upstream '{self.name}' broke off its stream: {exc}") from exc
        finally:
            response.release()
        record = acc.record(target.policy_version)
        record.sampler = self.sampler_of(body)
        yield record

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
