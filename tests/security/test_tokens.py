"""Token checks: constant-time comparisons (by inspection, since timing cannot be asserted reliably),
and the forgeries and malformed tokens they must refuse without raising."""

from __future__ import annotations

import ast
import inspect
import stat
from pathlib import Path

import pytest

import tether.auth
from tether.auth import TokenAuthority
from tether.project import Project


def _function(name: str) -> ast.FunctionDef:
    tree = ast.parse(inspect.getsource(tether.auth))
    return next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == name)


@pytest.mark.parametrize("name", ["is_admin", "rollout_of"])
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
    for path in Path(tether.auth.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare) and any(isinstance(op, ast.Eq | ast.NotEq) for op in node.ops):
                text = ast.unparse(node)
                if "admin_token" in text or "rollout_token" in text or "secret" in text:
                    offenders.append(f"{path.name}: {text}")
    assert offenders == []


def test_forged_and_malformed_tokens_are_refused() -> None:
    auth, stranger = TokenAuthority.generate(), TokenAuthority.generate()
    good = auth.rollout_token("ro-a.b")
    assert auth.rollout_of(good) == "ro-a.b"  # ids may contain the separator
    signature = good.rpartition(".")[2]
    candidates = [
        good[:-1] + ("0" if good[-1] != "0" else "1"),
        good + "0",
        good[:-1],
        f"tro-ro-a.{signature}",  # the signature moved to another id
        good + ".x",
        stranger.rollout_token("ro-a.b"),
        auth.admin_token,
        "tro-",
        "tro-.",
        "tro-ro-a.b." + "é" * 40,
        "",
        "\x00" * 50,
    ]
    for token in candidates:
        assert auth.rollout_of(token) is None, token
        assert auth.is_admin(token) is (token == auth.admin_token)
    assert not auth.is_admin(stranger.admin_token) and not auth.is_admin(good) and not auth.is_admin(None)


def test_secret_and_admin_token_files_are_private(tmp_path: Path) -> None:
    project = Project.at(tmp_path)
    path = project.write_admin_token(project.authority())
    for file in (project.secret_path, path):
        assert stat.S_IMODE(file.stat().st_mode) == 0o600
