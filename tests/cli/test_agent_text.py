"""Everything an agent writes reaches the operator's terminal as text: an agent whose stdout, stderr,
model name, reward name and spans are rich markup (`[/red]`, which crashes a markup print) and terminal
escapes (a colour, a window title, C1 CSI) runs through `tether rollout` and is shown by `tether store
show` and `tether store rollouts`: nothing crashes, the brackets are shown as they are, and no control
character reaches the output but as a visible escape."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.gateway.fake_upstream import Behaviour, create_fake_upstream
from tests.helpers import serve_app
from tether.cli.main import main
from tether.store import RolloutStatus, SQLiteStore
from tether.text import printable

AGENT = Path(__file__).parent / "agents" / "hostile_text_agent.py"
CONTROLS = [chr(code) for code in [*range(0x09), *range(0x0B, 0x20), *range(0x7F, 0xA0)]]


@pytest.fixture
def upstream() -> Iterator[str]:
    with serve_app(create_fake_upstream(Behaviour())) as url:
        yield url + "/v1"


def test_printable_writes_out_every_control_but_newline_and_tab() -> None:
    assert (
        printable("a\x1b[31mb\tc\nd\re\x07\x9b\x7f\u202e") == "a\\x1b[31mb\tc\nd\\x0de\\x07\\x9b\\x7f\\u202e"
    )
    assert printable("[/red] ünïcode 😀") == "[/red] ünïcode 😀"


def assert_shown_as_text(output: str) -> None:
    assert "[/red]" in output and "[bold]x[/bold]" in output
    assert "\\x1b[31m" in output and "\\x1b]0;title\\x07" in output and "\\x9b2J" in output
    assert not [c for c in CONTROLS if c in output], "a raw control character reached the terminal"


def test_an_agent_writing_markup_and_escapes_is_shown_as_text(
    tmp_path: Path, upstream: str, capsys: pytest.CaptureFixture[str]
) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"id": "ok"}) + "\n" + json.dumps({"id": "fails", "fail": True}) + "\n")
    rollout = ["rollout", "--agent", f"{sys.executable} {AGENT}", "--tasks", str(tasks), "--n-workers", "2"]
    project = ["--project-dir", str(tmp_path)]
    assert main([*rollout, "--upstream", upstream, "--upstream-token-ids", *project]) == 0
    printed = capsys.readouterr()
    assert "error:" in printed.err  # the failed rollout's error, quoting the agent's stderr
    assert_shown_as_text(printed.out + printed.err)

    store = SQLiteStore(tmp_path / ".tether" / "store.db")
    rollouts = {r.task_id: r for r in store.list_rollouts(limit=10)}
    assert rollouts["ok"].status == RolloutStatus.succeeded
    assert rollouts["fails"].status == RolloutStatus.failed
    for rollout_id in (rollouts["ok"].id, rollouts["fails"].id):
        assert main(["store", *project, "show", rollout_id]) == 0
        shown = capsys.readouterr()
        assert "model call 4" in shown.out  # the gateway's call, two forged ones and another span
        assert_shown_as_text(shown.out + shown.err)
    assert main(["store", *project, "rollouts"]) == 0
    listing = capsys.readouterr()
    assert not [c for c in CONTROLS if c in listing.out + listing.err]
