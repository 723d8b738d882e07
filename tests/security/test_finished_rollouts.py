"""A finished rollout's token is refused at once: the gateway caches the rollouts calls name, but the cache
is keyed on the store's `rollouts_epoch()`, which every rollout change in this process moves. So the call
right after the finish (no wait, no retry) is refused, on every route a rollout token may use."""

from __future__ import annotations

import httpx
import openai
import pytest

from tests.rigs import GatewayRig
from tether.store import RolloutStatus

CHAT = {"model": "policy", "messages": [{"role": "user", "content": "hi"}]}


@pytest.mark.parametrize("status", [RolloutStatus.succeeded, RolloutStatus.failed, RolloutStatus.cancelled])
def test_the_first_call_after_the_finish_is_refused(rig: GatewayRig, status: RolloutStatus) -> None:
    rollout_id, base_url, key = rig.session()
    llm = openai.OpenAI(base_url=base_url, api_key=key, max_retries=0)
    for _ in range(3):  # the rollout is in the gateway's cache, and valid there
        llm.chat.completions.create(**CHAT)
    epoch = rig.store.rollouts_epoch()

    rig.store.update_status(rollout_id, status)  # through the store the gateway itself uses

    assert rig.store.rollouts_epoch() != epoch
    with pytest.raises(openai.AuthenticationError) as refused:
        llm.chat.completions.create(**CHAT)
    assert status.value in refused.value.message
    headers = {"Authorization": f"Bearer {key}"}
    reward = httpx.post(base_url.removesuffix("/v1"), json={"value": 1}, headers=headers)
    assert reward.status_code == 401
    assert httpx.get(f"{base_url}/models", headers=headers).status_code == 401
    assert len(rig.store.query_spans(rollout_id=rollout_id)) == 3
    assert rig.store.query_rewards(rollout_id) == []


def test_a_stream_cannot_start_after_the_finish(rig: GatewayRig) -> None:
    rollout_id, base_url, key = rig.session()
    llm = openai.OpenAI(base_url=base_url, api_key=key, max_retries=0)
    list(llm.chat.completions.create(**CHAT, stream=True))
    rig.store.update_status(rollout_id, RolloutStatus.succeeded)
    with pytest.raises(openai.AuthenticationError):
        llm.chat.completions.create(**CHAT, stream=True)
    assert len(rig.store.query_spans(rollout_id=rollout_id)) == 1
