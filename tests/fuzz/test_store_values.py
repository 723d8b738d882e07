"""Values the store cannot keep are the caller's mistake (found by fuzzing the gateway's admin API)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.rigs import GatewayRig
from tether.store import RolloutRequest, SQLiteStore, Task
from tether.store.base import InvalidValue


def test_a_value_beyond_64_bits_is_refused_and_the_store_stays_usable(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "store.db")
    with pytest.raises(InvalidValue, match="64-bit"):
        store.enqueue([RolloutRequest(task=Task(input={"n": -(2**63) - 1}))])
    with pytest.raises(InvalidValue):
        store.put_resource("r", "json", [2**64])
    assert store.list_rollouts() == [] and store.list_resources() == []
    assert store.enqueue([RolloutRequest(task=Task(input={"n": 2**63 - 1}))])[0].input == {"n": 2**63 - 1}
    store.close()


def test_the_gateway_answers_400_not_500(rig: GatewayRig) -> None:
    admin = {"Authorization": f"Bearer {rig.auth.admin_token}"}
    response = httpx.post(f"{rig.url}/admin/sessions", json={"input": {"n": -(2**63) - 1}}, headers=admin)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == "invalid_value"
