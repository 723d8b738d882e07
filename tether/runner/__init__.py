"""The runner: launches unmodified agents over a task set, with timeouts, retries and rewards."""

from tether.runner.agents import LLM, AgentResult, CallableAgent, CommandAgent
from tether.runner.rewards import AIRRules, RewardError, air_rewards, evaluate, load_callable
from tether.runner.runner import AgentEndpoints, RolloutOutcome, Runner, RunnerConfig, summarize
from tether.runner.tasks import TaskFileError, load_tasks

__all__ = [
    "AIRRules",
    "LLM",
    "AgentEndpoints",
    "AgentResult",
    "CallableAgent",
    "CommandAgent",
    "RewardError",
    "RolloutOutcome",
    "Runner",
    "RunnerConfig",
    "TaskFileError",
    "air_rewards",
    "evaluate",
    "load_callable",
    "load_tasks",
    "summarize",
]
