"""Each command's settings tree: the sections it takes, with the defaults that differ by command.

    settings = TrainSettings()
    settings.learner.algorithm = "rloo"
    settings.sampling.group_size = 4

`tether COMMAND --print-config` writes a tree as TOML, `--config FILE` reads one back; the flags are made
from the same fields (`tether.cli.options`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tether.config.agent import AgentSettings, QuotaSettings, SandboxSettings
from tether.config.deployment import CanarySettings, SessionJudgeSettings, SessionTrainingSettings
from tether.config.placement import RaySettings, RunnerSettings, TrainRaySettings
from tether.config.rewards import RewardSettings
from tether.config.run import (
    GroupSettings,
    RunSettings,
    SearchTaskSettings,
    StoreSettings,
    TaskSettings,
    TrainRunSettings,
)
from tether.config.search import ExportFileSettings, PolicyExportSettings, SearchSettings
from tether.config.serving import (
    CapSettings,
    GatewaySettings,
    LimitSettings,
    ServerSettings,
    UpstreamSettings,
)
from tether.config.training import (
    CurriculumSettings,
    ImitationSettings,
    LearnerSettings,
    SamplingSettings,
    ScheduleSettings,
    UpdateSettings,
    ValidationSettings,
)


@dataclass
class RolloutSettings:
    """`tether rollout`: run the agent on tasks and record every call."""

    run: RunSettings = field(default_factory=RunSettings)
    agent: AgentSettings = field(default_factory=AgentSettings)
    tasks: TaskSettings = field(default_factory=TaskSettings)
    rewards: RewardSettings = field(default_factory=RewardSettings)
    groups: GroupSettings = field(default_factory=GroupSettings)
    sandbox: SandboxSettings = field(default_factory=SandboxSettings)
    quota: QuotaSettings = field(default_factory=QuotaSettings)
    caps: CapSettings = field(default_factory=CapSettings)
    server: ServerSettings = field(default_factory=ServerSettings)
    upstream: UpstreamSettings = field(default_factory=UpstreamSettings)
    runner: RunnerSettings = field(default_factory=RunnerSettings)
    ray: RaySettings = field(default_factory=RaySettings)
    store: StoreSettings = field(default_factory=StoreSettings)


@dataclass
class TrainSettings:
    """`tether train`: train the agent's policy from its own runs."""

    run: TrainRunSettings = field(default_factory=TrainRunSettings)
    agent: AgentSettings = field(default_factory=lambda: AgentSettings(n_workers=None))
    tasks: TaskSettings = field(default_factory=TaskSettings)
    rewards: RewardSettings = field(default_factory=RewardSettings)
    server: ServerSettings = field(default_factory=ServerSettings)
    learner: LearnerSettings = field(default_factory=LearnerSettings)
    imitation: ImitationSettings = field(default_factory=ImitationSettings)
    sessions: SessionTrainingSettings = field(default_factory=SessionTrainingSettings)
    update: UpdateSettings = field(default_factory=UpdateSettings)
    sampling: SamplingSettings = field(default_factory=SamplingSettings)
    schedule: ScheduleSettings = field(default_factory=ScheduleSettings)
    validation: ValidationSettings = field(default_factory=ValidationSettings)
    curriculum: CurriculumSettings = field(default_factory=CurriculumSettings)
    sandbox: SandboxSettings = field(default_factory=SandboxSettings)
    quota: QuotaSettings = field(default_factory=QuotaSettings)
    caps: CapSettings = field(default_factory=CapSettings)
    runner: RunnerSettings = field(default_factory=RunnerSettings)
    ray: TrainRaySettings = field(default_factory=TrainRaySettings)
    store: StoreSettings = field(default_factory=StoreSettings)


@dataclass
class ServeSettings:
    """`tether serve`: the gateway and the store's API, for agents run elsewhere."""

    gateway: GatewaySettings = field(default_factory=GatewaySettings)
    limits: LimitSettings = field(default_factory=LimitSettings)
    server: ServerSettings = field(default_factory=ServerSettings)
    upstream: UpstreamSettings = field(default_factory=UpstreamSettings)
    quota: QuotaSettings = field(default_factory=QuotaSettings)
    store: StoreSettings = field(default_factory=StoreSettings)
    canary: CanarySettings = field(default_factory=CanarySettings)
    judge: SessionJudgeSettings = field(default_factory=SessionJudgeSettings)


@dataclass
class OptimizePromptSettings:
    """`tether optimize-prompt`: search the agent's prompt, the policy fixed."""

    run: RunSettings = field(default_factory=RunSettings)
    agent: AgentSettings = field(default_factory=AgentSettings)
    tasks: SearchTaskSettings = field(default_factory=SearchTaskSettings)
    rewards: RewardSettings = field(default_factory=RewardSettings)
    search: SearchSettings = field(default_factory=SearchSettings)
    sandbox: SandboxSettings = field(default_factory=SandboxSettings)
    quota: QuotaSettings = field(default_factory=QuotaSettings)
    caps: CapSettings = field(default_factory=CapSettings)
    server: ServerSettings = field(default_factory=ServerSettings)
    upstream: UpstreamSettings = field(default_factory=UpstreamSettings)
    runner: RunnerSettings = field(default_factory=RunnerSettings)
    ray: RaySettings = field(default_factory=RaySettings)
    store: StoreSettings = field(default_factory=StoreSettings)


@dataclass
class TransitionsExportSettings:
    """`tether transitions export`: a run's transitions as training data."""

    export: ExportFileSettings = field(default_factory=ExportFileSettings)
    store: StoreSettings = field(default_factory=StoreSettings)


@dataclass
class ExportSettings:
    """`tether export`: a run's policy version as a PEFT adapter or a merged model folder."""

    export: PolicyExportSettings = field(default_factory=PolicyExportSettings)


# The commands that run agents: each has an agent, tasks, rewards, a sandbox, a runner, Ray and a store.
RunsAgents = RolloutSettings | TrainSettings | OptimizePromptSettings
