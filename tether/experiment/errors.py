"""The one error of bad settings or inputs, raised before anything runs."""

from __future__ import annotations


class SettingsError(ValueError):
    """Settings a command refuses, or inputs it cannot use: the message names the setting and the fix."""
