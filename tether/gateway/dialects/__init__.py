"""Other model APIs served over the gateway's chat-completions path: OpenAI's Responses API and
Anthropic's Messages API. Each call is translated to a chat body, made (routed, admitted, overridden,
recorded) exactly as a chat completion, and its answer translated back."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from starlette.responses import Response

from tether.gateway.dialects import messages, responses
from tether.gateway.dialects.common import chat_chunks, close_quietly
from tether.gateway.errors import GatewayError


@dataclass(frozen=True)
class Dialect:
    api: str  # the span's `api` attribute
    to_chat: Callable[[dict[str, Any]], dict[str, Any]]
    from_chat: Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]]
    stream: Callable[[AsyncIterator[dict[str, Any]], dict[str, Any]], AsyncIterator[bytes]]
    error_response: Callable[[GatewayError], Response]


DIALECTS: dict[str, Dialect] = {
    # The Responses API reports errors in the chat-completions shape.
    "responses": Dialect(
        "responses", responses.to_chat, responses.from_chat, responses.stream, GatewayError.response
    ),
    "messages": Dialect(
        "messages", messages.to_chat, messages.from_chat, messages.stream, messages.error_response
    ),
}


async def translated_stream(
    dialect: Dialect, relay: AsyncIterator[bytes], request: dict[str, Any]
) -> AsyncIterator[bytes]:
    """The dialect's events for the gateway's relayed chat stream. Closing this closes the relay, which
    releases the call's admission slot."""
    try:
        async for event in dialect.stream(chat_chunks(relay), request):
            yield event
    finally:
        await close_quietly(relay)


__all__ = ["DIALECTS", "Dialect", "translated_stream"]
