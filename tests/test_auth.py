"""`authenticate` (who holds a token, without the store) and `check_live` (whether a rollout token's
rollout still takes calls), which the gateway, the store API and the OTLP receiver all use."""

from __future__ import annotations

import pytest

from tether.auth import AuthError, Caller, Refusal, TokenAuthority, authenticate, check_live, find_rollout
from tether.store import RolloutStatus, SQLiteStore

AUTH = TokenAuthority.generate()


def refusal_of(token: str | None, path_rollout: str | None = None) -> Refusal:
    with pytest.raises(AuthError) as caught:
        authenticate(AUTH, token, path_rollout)
    return caught.value.refusal


def test_the_admin_token_is_the_admin_on_any_path() -> None:
    assert authenticate(AUTH, AUTH.admin_token) == Caller() and Caller().is_admin
    assert authenticate(AUTH, AUTH.admin_token, "ro-any").is_admin


def test_a_rollout_token_names_its_rollout_and_only_its_paths() -> None:
    token = AUTH.rollout_token("ro-a")
    assert authenticate(AUTH, token) == Caller("ro-a") and not Caller("ro-a").is_admin
    assert authenticate(AUTH, token, "ro-a") == Caller("ro-a")
    assert refusal_of(token, "ro-b") is Refusal.OTHER_ROLLOUT


def test_missing_and_foreign_tokens_are_refused() -> None:
    assert refusal_of(None) is Refusal.MISSING and refusal_of("") is Refusal.MISSING
    stranger = TokenAuthority.generate()
    for token in (stranger.admin_token, stranger.rollout_token("ro-a"), "tro-ro-a.0", "sk-123"):
        assert refusal_of(token) is Refusal.INVALID, token


def test_a_token_works_while_its_rollout_is_unfinished() -> None:
    store = SQLiteStore.in_memory()
    try:
        rollout_id = store.start_session({"q": 1}).rollout.id
        assert check_live(rollout_id, find_rollout(store, rollout_id)).id == rollout_id
        store.update_status(rollout_id, RolloutStatus.failed)
        with pytest.raises(AuthError) as expired:
            check_live(rollout_id, find_rollout(store, rollout_id))
        assert (expired.value.refusal, expired.value.status) == (Refusal.EXPIRED, "failed")
        assert find_rollout(store, "ro-missing") is None
        with pytest.raises(AuthError) as unknown:
            check_live("ro-missing", None)
        assert (unknown.value.refusal, unknown.value.rollout_id) == (Refusal.UNKNOWN_ROLLOUT, "ro-missing")
    finally:
        store.close()
