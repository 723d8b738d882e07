"""The policy update's settings, kept apart from the torch code so that the loop and the CLI can build them
without loading torch."""

from __future__ import annotations

import math
from dataclasses import dataclass

from tether.contracts import LOSS_AGGREGATIONS, TIS_LEVELS, TIS_MODES

LLAMA_TARGET_MODULES: tuple[str, ...] = (
    "q_proj",
    "k_proj",
    "v_proj",
    "o_proj",
    "gate_proj",
    "up_proj",
    "down_proj",
)
DEFAULT_LORA_LR = 1e-4
DEFAULT_FULL_LR = 1e-5
RL_DECAY_FLOOR = 0.1


@dataclass
class TrainConfig:
    """Everything the policy update needs. `lr=None` picks 1e-4 with LoRA and 1e-5 for full fine-tuning."""

    model: str  # catalogue name (see tether.models.catalog) or local HF folder
    lora: bool = True
    lora_r: int = 16
    lora_alpha: int = 32
    lora_dropout: float = 0.0
    target_modules: tuple[str, ...] = LLAMA_TARGET_MODULES
    lr: float | None = None
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    adam_eps: float = 1e-8
    warmup_steps: int = 0  # linear warmup, then constant
    # RL after imitation: from optimizer step `rl_start_step` (the SFT updates before it) the learning rate
    # is `rl_lr` (None: `lr`), warmed up linearly over `rl_warmup_steps` of its own.
    rl_lr: float | None = None
    rl_warmup_steps: int = 0
    rl_start_step: int = 0
    # RL's rate then falls along a cosine to RL_DECAY_FLOOR of itself over `rl_decay_steps` updates (0: none):
    # a constant rate lets a long run sharpen past its best held-out score.
    rl_decay_steps: int = 0
    grad_clip: float = 1.0  # max global grad norm; 0 disables clipping (the norm is still reported)
    clip_low: float = 0.2
    clip_high: float = 0.28
    tis_cap: float | None = 2.0  # None disables the truncation
    # "mask": drop tokens whose weight pi_old / mu leaves [1 / tis_cap, tis_cap] instead of truncating it.
    tis_mode: str = "truncate"
    tis_level: str = "token"
    kl_coef: float = 0.0
    ppo_epochs: int = 1  # passes over each batch
    mini_batches: int = 1  # optimizer steps per pass (whole rollouts each)
    # "rollout": token means within each rollout, every rollout counts once; "token": one mean over every
    # trained token of the batch (DAPO's token-level mean).
    loss_agg: str = "rollout"
    micro_batch_tokens: int = 2048  # padded tokens (rows x width) per forward/backward
    # Run each token prefix that several samples share (a group's prompt, a system prompt, a multi-turn
    # rollout's earlier calls) once, in packed rows of at most `packed_row_tokens` (tether.learner.packing).
    share_prefixes: bool = True
    packed_row_tokens: int = 1024
    max_seq_len: int = 4096  # prompt + response; also limited by the model's context
    # bf16 autocast of the transformer body (weights, lm_head and loss stay fp32). None: the built-in
    # engine's precision (bf16 on a CUDA device that supports it, fp32 on CPUs), so learner and sampler agree.
    bf16: bool | None = None
    seed: int = 0
    device: str | None = None  # default: cuda if available, else cpu
    cache_dir: str | None = None  # model cache for catalogue names (default: tether's)

    def __post_init__(self) -> None:
        self.target_modules = tuple(self.target_modules)
        self.betas = (float(self.betas[0]), float(self.betas[1]))
        if not 0 <= self.clip_low < 1 or self.clip_high < 0:
            raise ValueError(
                f"need 0 <= clip_low < 1 and clip_high >= 0, got {self.clip_low}, {self.clip_high}"
            )
        if self.tis_cap is not None and self.tis_cap <= 0:
            raise ValueError(f"tis_cap must be positive or None, got {self.tis_cap}")
        if self.micro_batch_tokens < 1 or self.max_seq_len < 2 or self.packed_row_tokens < 1:
            raise ValueError("micro_batch_tokens and packed_row_tokens must be >= 1 and max_seq_len >= 2")
        if self.kl_coef < 0 or self.grad_clip < 0:
            raise ValueError("kl_coef and grad_clip must be >= 0")
        if self.ppo_epochs < 1 or self.mini_batches < 1:
            raise ValueError(
                f"ppo_epochs and mini_batches must be >= 1, got {self.ppo_epochs}, {self.mini_batches}"
            )
        if self.loss_agg not in LOSS_AGGREGATIONS:
            raise ValueError(f"loss_agg must be one of {', '.join(LOSS_AGGREGATIONS)}, got {self.loss_agg!r}")
        if self.tis_mode not in TIS_MODES:
            raise ValueError(f"tis_mode must be one of {', '.join(TIS_MODES)}, got {self.tis_mode!r}")
        if (self.rl_lr is not None and self.rl_lr <= 0) or min(
            self.rl_warmup_steps, self.rl_start_step, self.rl_decay_steps
        ) < 0:
            raise ValueError("--rl-lr must be above 0, and --rl-warmup-steps and the SFT steps >= 0")
        if self.tis_level not in TIS_LEVELS:
            raise ValueError(f"tis_level must be one of {', '.join(TIS_LEVELS)}, got {self.tis_level!r}")
        if self.tis_mode == "mask" and (self.tis_cap is None or self.tis_cap <= 1):
            raise ValueError(
                "tis_mode 'mask' keeps ratios in [1 / tis_cap, tis_cap]: tis_cap must be above 1"
            )

    @property
    def learning_rate(self) -> float:
        if self.lr is not None:
            return self.lr
        return DEFAULT_LORA_LR if self.lora else DEFAULT_FULL_LR

    def lr_factor(self, step: int) -> float:
        """The learning rate of optimizer step `step` (from 0) over `learning_rate`: SFT's warm-up, then
        from `rl_start_step` RL's rate, its warm-up and its decay."""

        def ramp(done: int, over: int) -> float:
            return min(1.0, (done + 1) / over) if over > 0 else 1.0

        if step < self.rl_start_step:
            return ramp(step, self.warmup_steps)
        warmup = self.rl_warmup_steps or (0 if self.rl_start_step else self.warmup_steps)
        scale = 1.0 if self.rl_lr is None or not self.learning_rate else self.rl_lr / self.learning_rate
        done = step - self.rl_start_step
        return scale * ramp(done, warmup) * self._decay(done)

    def _decay(self, done: int) -> float:
        if self.rl_decay_steps <= 0:
            return 1.0
        progress = min(1.0, done / self.rl_decay_steps)
        return RL_DECAY_FLOOR + (1 - RL_DECAY_FLOOR) * 0.5 * (1 + math.cos(math.pi * progress))
