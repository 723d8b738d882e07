"""`authenticate` (who holds a token, without the store) and `check_live` (whether a token's attempt is
still the rollout's running one), which the gateway, the store API and the OTLP receiver all use."""

from __future__ import annotations

import pytest

from tether.store import RolloutRequest, RolloutStatus, SQLiteStore, Task
from tether.store.auth import (
    AuthError,
    Caller,
    Refusal,
    TokenAuthority,
    authenticate,
    check_live,
    find_rollout,
)

AUTH = TokenAuthority.generate()


def refusal_of(
    token: str | None, path_rollout: str | None = None, path_attempt: int | None = None
) -> Refusal:
    with pytest.raises(AuthError) as caught:
        authenticate(AUTH, token, path_rollout, path_attempt)
    return caught.value.refusal


def live_refusal(store: SQLiteStore, rollout_id: str, attempt: int) -> AuthError:
    with pytest.raises(AuthError) as caught:
        check_live(rollout_id, find_rollout(store, rollout_id), attempt)
    return caught.value


def test_the_admin_token_is_the_admin_on_any_path() -> None:
    assert authenticate(AUTH, AUTH.admin_token) == Caller() and Caller().is_admin
    assert authenticate(AUTH, AUTH.admin_token, "ro-any").is_admin


def test_a_rollout_token_names_its_attempt_and_only_its_paths() -> None:
    token = AUTH.rollout_token("ro-a", 2)
    assert authenticate(AUTH, token) == Caller("ro-a", 2) and not Caller("ro-a", 2).is_admin
    assert authenticate(AUTH, token, "ro-a") == authenticate(AUTH, token, "ro-a", 2) == Caller("ro-a", 2)
    assert refusal_of(token, "ro-b") is Refusal.OTHER_ROLLOUT
    assert refusal_of(token, "ro-b", 2) is Refusal.OTHER_ROLLOUT
    assert refusal_of(token, "ro-a", 1) is Refusal.OTHER_ATTEMPT


def test_missing_and_foreign_tokens_are_refused() -> None:
    assert refusal_of(None) is Refusal.MISSING and refusal_of("") is Refusal.MISSING
    stranger = TokenAuthority.generate()
    for token in (stranger.admin_token, stranger.rollout_token("ro-a", 1), "tro-ro-a.1.0", "sk-123"):
        assert refusal_of(token) is Refusal.INVALID, token


def test_a_token_works_while_its_rollout_is_unfinished() -> None:
    store = SQLiteStore.in_memory()
    try:
        rollout_id = store.start_session({"q": 1}).rollout.id
        assert check_live(rollout_id, find_rollout(store, rollout_id)).id == rollout_id
        assert check_live(rollout_id, find_rollout(store, rollout_id), 1).id == rollout_id
        store.update_status(rollout_id, RolloutStatus.failed)
        with pytest.raises(AuthError) as expired:
            check_live(rollout_id, find_rollout(store, rollout_id))
        assert (expired.value.refusal, expired.value.status) == (Refusal.EXPIRED, "failed")
        finished = live_refusal(store, rollout_id, 1)
        assert finished.refusal is Refusal.EXPIRED
        assert finished.reason == f"rollout {rollout_id} finished (failed): its tokens no longer work"
        assert find_rollout(store, "ro-missing") is None
        with pytest.raises(AuthError) as unknown:
            check_live("ro-missing", None)
        assert (unknown.value.refusal, unknown.value.rollout_id) == (Refusal.UNKNOWN_ROLLOUT, "ro-missing")
    finally:
        store.close()


def test_a_token_of_attempt_1_is_refused_once_attempt_2_started() -> None:
    store = SQLiteStore.in_memory()
    try:
        rollout = store.enqueue([RolloutRequest(task=Task(input={"q": 1}), max_attempts=3)])[0]
        assert live_refusal(store, rollout.id, 1).refusal is Refusal.NOT_STARTED  # still queued
        store.claim("w")
        assert check_live(rollout.id, find_rollout(store, rollout.id), 1).attempt_count == 1
        assert live_refusal(store, rollout.id, 2).refusal is Refusal.NOT_STARTED

        store.update_status(rollout.id, RolloutStatus.failed, attempt=1)  # queued for attempt 2
        between = live_refusal(store, rollout.id, 1)
        assert between.refusal is Refusal.ATTEMPT_OVER
        assert (
            between.reason == f"attempt 1 of rollout {rollout.id} is over: it ended and the rollout is queued"
        )

        store.claim("w")
        replaced = live_refusal(store, rollout.id, 1)
        assert replaced.refusal is Refusal.ATTEMPT_OVER
        assert (
            replaced.reason == f"attempt 1 of rollout {rollout.id} is over: a retry (attempt 2) replaced it"
        )
        assert check_live(rollout.id, find_rollout(store, rollout.id), 2).attempt_count == 2

        store.update_status(rollout.id, RolloutStatus.succeeded, attempt=2)
        assert live_refusal(store, rollout.id, 1).refusal is Refusal.ATTEMPT_OVER
        assert live_refusal(store, rollout.id, 2).refusal is Refusal.EXPIRED
    finally:
        store.close()


def test_a_token_of_rollout_a_cannot_address_rollout_b() -> None:
    store = SQLiteStore.in_memory()
    try:
        a, b = (store.start_session({"q": n}).rollout.id for n in (1, 2))
        token = AUTH.rollout_token(a, 1)
        assert refusal_of(token, b) is Refusal.OTHER_ROLLOUT
        assert refusal_of(token, b, 1) is Refusal.OTHER_ROLLOUT
        assert authenticate(AUTH, token) == Caller(a, 1)  # without a path: its own rollout, never b
    finally:
        store.close()
