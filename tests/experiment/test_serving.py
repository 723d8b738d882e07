"""`--policy-server KIND` names the policy server by its registered kind; the older spellings (`--engine`,
`--policy-server URL,...`, `--upstream` alone) still choose what they chose."""

from __future__ import annotations

import pytest

from tether.cli.main import build_parser
from tether.cli.options import settings_from_args
from tether.experiment.errors import SettingsError
from tether.experiment.serving import engine_kind, policy_server_options

UPSTREAM = "http://127.0.0.1:9/v1"


def kind_of(*flags: str) -> tuple[str, tuple[str, ...]]:
    args = build_parser().parse_args(["rollout", "--agent", "a", "--tasks", "t.jsonl", *flags])
    settings = settings_from_args(args)
    kind = engine_kind(settings.server, settings.upstream)
    return kind, policy_server_options(settings.server, settings.upstream, None, "policy", None).vllm.urls


@pytest.mark.parametrize(
    ("flags", "kind", "urls"),
    [
        ((), "builtin", ()),
        (("--policy-server", "builtin"), "builtin", ()),
        (("--policy-server", "vllm"), "vllm", ()),
        (("--engine", "vllm"), "vllm", ()),
        (
            ("--policy-server", "http://127.0.0.1:1/v1, http://127.0.0.1:2/v1"),
            "vllm",
            ("http://127.0.0.1:1/v1", "http://127.0.0.1:2/v1"),
        ),
        (("--upstream", UPSTREAM), "openai", ()),
        (("--policy-server", "openai", "--upstream", UPSTREAM), "openai", ()),
    ],
)
def test_the_kind_and_the_servers_a_command_line_names(
    flags: tuple[str, ...], kind: str, urls: tuple[str, ...]
) -> None:
    assert kind_of(*flags) == (kind, urls)


def test_an_upstream_belongs_to_the_openai_kind_only() -> None:
    with pytest.raises(SettingsError, match=r"--policy-server openai forwards to --upstream URL: give it"):
        kind_of("--policy-server", "openai")
    with pytest.raises(
        SettingsError, match=r"--upstream is the openai policy server's: drop it, or --policy-server vllm"
    ):
        kind_of("--engine", "vllm", "--upstream", UPSTREAM)
