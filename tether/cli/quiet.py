"""What a command prints: Tether's own lines and progress, not its libraries' warnings and bars.

transformers, PEFT, the Hugging Face hub and torch print progress bars, advisories and warnings meant for
their own users (weight-loading bars, "Adapter ... was active which is now deleted" at every adapter swap,
FutureWarnings). A command silences them and logs each at debug level; `tether -v COMMAND` shows them, and
Tether's info lines, instead.
"""

from __future__ import annotations

import logging
import sys
import warnings
from pathlib import Path
from typing import TextIO

import tether

SILENCED = logging.getLogger("tether.silenced")
_TETHER_DIR = str(Path(tether.__file__).resolve().parent)
# The libraries whose loggers and bars are set to errors only; they are configured only where a command
# loads models, since importing them costs a second or more.
LIBRARY_LOGGERS = ("transformers", "peft", "huggingface_hub", "accelerate", "torch", "httpx")


def configure_output(verbose: bool, loads_models: bool) -> None:
    """Silence third-party output for this process (or, with `verbose`, show it and Tether's info)."""
    if verbose:
        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
        return
    warnings.showwarning = _log_foreign_warning
    for name in LIBRARY_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)
    if loads_models:
        _quiet_hugging_face()


def _log_foreign_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    """Tether's own warnings print as usual; any other is logged at debug level (shown with -v)."""
    if str(Path(filename).resolve()).startswith(_TETHER_DIR):
        sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))
        return
    SILENCED.debug("%s:%d: %s: %s", filename, lineno, category.__name__, message)


def _quiet_hugging_face() -> None:
    try:
        import huggingface_hub.utils
        import transformers.utils.logging as transformers_logging
    except ImportError:  # a command that never loads a model needs neither
        return
    transformers_logging.set_verbosity_error()
    transformers_logging.disable_progress_bar()
    huggingface_hub.utils.disable_progress_bars()
    # transformers' own configuration put its level back: set it after.
    logging.getLogger("transformers").setLevel(logging.ERROR)
