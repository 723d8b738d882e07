"""Every code block of the README and the docs runs (`tests/docs/snippets.py` says how each kind is run
and how a block is marked as needing a GPU or a cluster)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.docs.snippets import NEEDS, ROOT, RUN_LANGUAGES, TEXT, Block, all_blocks, chains

BLOCKS = all_blocks()
CHAINS = chains([block for block in BLOCKS if block.language != TEXT])
BIN = Path(sys.executable).parent
TIMEOUT_S = 600


def test_every_block_is_run_or_marked_with_what_it_needs() -> None:
    for block in BLOCKS:
        known = block.language in RUN_LANGUAGES or block.language == TEXT
        assert known, f"{block.where}: a ```{block.language or '(no language)'} block: name its language"
        assert block.needs is None or block.needs in NEEDS, f"{block.where}: needs={block.needs}?"
        if block.language == "toml":
            assert block.options.get("config"), f"{block.where}: a TOML block names its command (config=)"


@pytest.mark.parametrize("chain", CHAINS, ids=[chain[0].where for chain in CHAINS])
def test_the_block_runs(chain: list[Block], tmp_path: Path) -> None:
    if chain[0].needs:
        pytest.skip(f"needs a {chain[0].needs}")
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    for index, block in enumerate(chain):
        run_block(block, tmp_path, index)


def run_block(block: Block, folder: Path, index: int) -> None:
    if block.language == "json":
        text = block.code.strip()
        try:
            json.loads(text)
        except json.JSONDecodeError:  # JSON lines
            for line in text.splitlines():
                json.loads(line)
        return
    if block.language == "yaml":
        list(yaml.safe_load_all(block.code))
        return
    if block.language == "bash":
        argv = ["bash", "-euo", "pipefail", "-c", block.code]
    elif block.language == "python":
        script = folder / f"snippet_{index}.py"
        script.write_text(block.code)
        argv = [sys.executable, str(script)]
    else:  # toml: a config file the command reads back
        config = folder / f"snippet_{index}.toml"
        config.write_text(block.code)
        command = block.options["config"].split(",")
        argv = [str(BIN / "tether"), *command, "--config", str(config), "--print-config"]
    done = subprocess.run(
        argv, cwd=folder, env=snippet_env(), capture_output=True, text=True, timeout=TIMEOUT_S
    )
    output = f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    assert done.returncode == 0, f"{block.where} exited {done.returncode}:\n{output}"


def snippet_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', os.defpath)}"
    env["TETHER_MODEL"] = "tiny-random"
    return env
