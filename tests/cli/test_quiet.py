"""A command's output: no third-party warning or progress bar unless `-v` asks for them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

# Loads a model (transformers draws its weight-loading bar) and raises a library's FutureWarning, with the
# output configured as `tether COMMAND` configures it (`-v` passed as argv[1]).
PROGRAM = """
import sys, warnings
from tether.cli.quiet import configure_output
configure_output(verbose=sys.argv[1] == "-v", loads_models=True)
from transformers import AutoModelForCausalLM
AutoModelForCausalLM.from_pretrained(sys.argv[2])
warnings.warn_explicit("a library's advice", FutureWarning, "site-packages/somelib/module.py", 7)
import logging
logging.getLogger("tether.example").warning("a line of Tether's own")
"""


def run(tiny: Path, verbose: bool) -> str:
    argv = [sys.executable, "-c", PROGRAM, "-v" if verbose else "-", str(tiny)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=True)
    return done.stdout + done.stderr


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tether.models.catalog import TINY_RANDOM, resolve_model

    return resolve_model(TINY_RANDOM, tmp_path_factory.mktemp("models"))


def test_a_command_prints_its_own_lines_and_no_library_bars_or_warnings(tiny: Path) -> None:
    out = run(tiny, verbose=False)
    assert "a line of Tether's own" in out
    assert "Loading weights" not in out and "FutureWarning" not in out and "%|" not in out


def test_verbose_shows_what_was_silenced(tiny: Path) -> None:
    out = run(tiny, verbose=True)
    assert "a line of Tether's own" in out
    assert "Loading weights" in out and "FutureWarning: a library's advice" in out
