"""The runner: launches unmodified agents over a task set, with timeouts, retries and rewards.

`pool.py` claims and runs rollouts, `driver.py` enqueues them and learns outcomes from the store,
`runner.py` puts the two together for one run, `runs.py` names runs and resumes them.
"""

from tether.runner.agents import LLM, AgentResult, CallableAgent, CommandAgent
from tether.runner.driver import Driver, RolloutOutcome, RunnerStats, read_outcome, summarize
from tether.runner.pool import AgentEndpoints, RunnerConfig, WorkerPool
from tether.runner.rewards import AIRRules, RewardError, air_rewards, evaluate, load_callable
from tether.runner.runner import Runner
from tether.runner.tasks import TaskFileError, load_tasks

__all__ = [
    "AIRRules",
    "LLM",
    "AgentEndpoints",
    "AgentResult",
    "CallableAgent",
    "CommandAgent",
    "Driver",
    "RewardError",
    "RolloutOutcome",
    "Runner",
    "RunnerConfig",
    "RunnerStats",
    "TaskFileError",
    "WorkerPool",
    "air_rewards",
    "evaluate",
    "load_callable",
    "load_tasks",
    "read_outcome",
    "summarize",
]
