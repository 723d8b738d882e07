"""Token checks: constant-time comparisons (by inspection, since timing cannot be asserted reliably),
and the forgeries and malformed tokens they must refuse without raising."""

from __future__ import annotations

import ast
import hashlib
import hmac
import inspect
import stat
from pathlib import Path

import pytest

import tether.store.auth
from tether.project import Project
from tether.store.auth import AttemptGrant, TokenAuthority


def _function(name: str) -> ast.FunctionDef:
    tree = ast.parse(inspect.getsource(tether.store.auth))
    return next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == name)


@pytest.mark.parametrize("name", ["is_admin", "attempt_of"])
def test_token_checks_compare_in_constant_time(name: str) -> None:
    function = _function(name)
    calls = [ast.unparse(n.func) for n in ast.walk(function) if isinstance(n, ast.Call)]
    assert "hmac.compare_digest" in calls
    equalities = [
        ast.unparse(n)
        for n in ast.walk(function)
        if isinstance(n, ast.Compare) and any(isinstance(op, ast.Eq | ast.NotEq) for op in n.ops)
    ]
    assert equalities == [], f"{name} compares with ==: {equalities}"


def test_no_server_module_compares_tokens_with_equality() -> None:
    offenders = []
    for path in Path(tether.store.auth.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare) and any(isinstance(op, ast.Eq | ast.NotEq) for op in node.ops):
                text = ast.unparse(node)
                if "admin_token" in text or "rollout_token" in text or "secret" in text:
                    offenders.append(f"{path.name}: {text}")
    assert offenders == []


def test_a_token_names_one_attempt_of_one_rollout() -> None:
    auth = TokenAuthority.generate()
    good = auth.rollout_token("ro-a.b", 2)
    assert auth.attempt_of(good) == AttemptGrant("ro-a.b", 2)  # ids may contain the separator
    assert good.startswith("tro-ro-a.b.2.")
    for attempt in (0, -1):
        with pytest.raises(ValueError):
            auth.rollout_token("ro-a", attempt)


def test_forged_and_malformed_tokens_are_refused() -> None:
    auth, stranger = TokenAuthority.generate(), TokenAuthority.generate()
    good = auth.rollout_token("ro-a.b", 1)
    signature = good.rpartition(".")[2]
    legacy = "tro-ro-a.b." + hmac.new(auth.secret, b"rollout:ro-a.b", hashlib.sha256).hexdigest()[:40]
    candidates = [
        good[:-1] + ("0" if good[-1] != "0" else "1"),
        good + "0",
        good[:-1],
        f"tro-ro-a.1.{signature}",  # the signature moved to another id
        f"tro-ro-a.b.2.{signature}",  # ... or to another attempt
        f"tro-ro-a.b.01.{signature}",  # ... or to another spelling of the same one
        f"tro-ro-a.b.+1.{signature}",
        f"tro-ro-a.b.\u0661.{signature}",  # a non-ASCII digit one
        f"tro-ro-a.b.{signature}",  # without its attempt
        legacy,  # the attempt-less token of old, signed with this project's secret
        good + ".x",
        stranger.rollout_token("ro-a.b", 1),
        auth.admin_token,
        "tro-",
        "tro-.",
        "tro-..",
        "tro-ro-a.b.1." + "é" * 40,
        "",
        "\x00" * 50,
    ]
    for token in candidates:
        assert auth.attempt_of(token) is None, token
        assert auth.is_admin(token) is (token == auth.admin_token)
    assert not auth.is_admin(stranger.admin_token) and not auth.is_admin(good) and not auth.is_admin(None)


def test_secret_and_admin_token_files_are_private(tmp_path: Path) -> None:
    project = Project.at(tmp_path)
    path = project.write_admin_token(project.authority())
    for file in (project.secret_path, path):
        assert stat.S_IMODE(file.stat().st_mode) == 0o600
