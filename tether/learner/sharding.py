"""FSDP2 sharding for the learner's ranks (`--learner-sharding fsdp`), for models that do not fit on one
device: each rank keeps 1/N of every parameter, gradient and optimizer state.

`torch.distributed.fsdp.fully_shard` makes one unit of each decoder layer and one of the
`TokenScorer` around them (embedding, final norm and head, tied in small models: one unit so that the
tie holds). Gradients are reduce-scattered as sums (no division by the world size), because every rank
already normalizes its loss by the whole batch's weight. Every forward is a collective here, so the
ranks run equally many micro-batches (`Ranks.pad_plan` pads with blanks), and saving gathers the
whole tensors on every rank in one order while rank 0 alone writes. A checkpoint is the single-rank
one: the optimizer state is gathered into the plain `state_dict` layout.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch.distributed.tensor import DTensor, distribute_tensor

if TYPE_CHECKING:
    from tether.learner.model import TokenScorer


def shard(scorer: TokenScorer, world: int, device: str) -> None:
    """Shard `scorer` (a `TokenScorer`) in place over all `world` ranks: a unit per decoder layer."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import FSDPModule, fully_shard

    mesh = init_device_mesh(device, (world,))
    decoder: Any = scorer.causal_lm.get_decoder()
    for layer in decoder.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(scorer, mesh=mesh)
    for module in scorer.modules():
        if isinstance(module, FSDPModule):
            module.set_gradient_divide_factor(1.0)  # a sum: the losses are normalized already
            module.set_force_sum_reduction_for_comms(True)  # gloo has no pre-multiplied sum


def whole(tensor: torch.Tensor) -> torch.Tensor:
    """The unsharded tensor, on the CPU (a collective for a DTensor: every rank calls it, in one order)."""
    if isinstance(tensor, DTensor):
        tensor = tensor.full_tensor()
    return tensor.detach().cpu().clone()


def whole_state(state: dict[str, Any]) -> dict[str, Any]:
    """`state` with every DTensor value gathered (the optimizer's per-parameter state, say)."""
    return {
        key: whole_state(value)
        if isinstance(value, dict)
        else whole(value)
        if isinstance(value, DTensor)
        else value
        for key, value in state.items()
    }


def like(value: torch.Tensor, param: torch.Tensor) -> torch.Tensor:
    """`value` (a whole tensor) sharded as `param` is; unchanged when `param` is not sharded."""
    if isinstance(param, DTensor) and not isinstance(value, DTensor) and value.shape == param.shape:
        return distribute_tensor(value.to(param.dtype), param.device_mesh, list(param.placements))
    return value


def shard_optimizer_state(optimizer: torch.optim.Optimizer) -> None:
    """After `load_state_dict` of a whole state: shard each parameter's moments as the parameter is."""
    for group in optimizer.param_groups:
        for param in group["params"]:
            state = optimizer.state.get(param, {})
            for key, value in list(state.items()):
                if isinstance(value, torch.Tensor) and value.dim() > 0:
                    state[key] = like(value, param)
