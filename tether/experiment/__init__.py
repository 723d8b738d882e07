"""From a command's settings tree (`tether.config`) to an opened experiment: the agent and its inputs, the
rewards, the sandbox, the store, the placement, the run record and the policy server. Every command that
runs agents, `tether serve` and the Python API (`tether.train`) take their parts from here, built from
the tree alone: the command line only parses flags into a tree (`tether.cli`).

Bad settings raise `SettingsError` with one line naming the setting and the fix."""

from tether.experiment.errors import SettingsError
from tether.experiment.secrets import Secrets

__all__ = ["Secrets", "SettingsError"]
