"""Promotion with a canary: a new policy version serves a share of a deployment's sessions, its later
rewards are compared with the incumbent's, and a rule promotes it or rolls it back (`canary`), run by
`tether serve --canary SHARE --watch DIR` (`controller`)."""

from tether.deploy.canary import CanaryRule, Comparison, Decision, arm_of, compare, decide
from tether.deploy.controller import CanaryController, CanaryState, PolicyArm

__all__ = [
    "CanaryController",
    "CanaryRule",
    "CanaryState",
    "Comparison",
    "Decision",
    "PolicyArm",
    "arm_of",
    "compare",
    "decide",
]
