"""The web dashboard at `/ui`: runs and their curves, rollouts, one rollout's trace, calls, tokens and
transitions, and prompt-search candidates. Read-only; the admin or the viewer token opens it."""

from tether.dashboard.router import DashboardConfig, install_dashboard

__all__ = ["DashboardConfig", "install_dashboard"]
