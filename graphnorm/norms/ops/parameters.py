"""The learnable parameters several norms share: a per-channel gain and bias, and :class:`UnwrappedPyGNorm`, the base
of the norms whose checkpoints may hold their parameters under a wrapped PyG module's keys."""

from __future__ import annotations

import torch
from torch import nn


def register_affine(module: nn.Module, channels: int, affine: bool) -> None:
    """Register ``module.weight`` (per-channel gain, init 1) and ``module.bias`` (init 0), or both as None."""
    module.register_parameter("weight", nn.Parameter(torch.ones(channels)) if affine else None)
    module.register_parameter("bias", nn.Parameter(torch.zeros(channels)) if affine else None)


def reset_affine(module: nn.Module) -> None:
    """``module.weight`` back to 1 and ``module.bias`` back to 0, each where it is not None."""
    if module.weight is not None:
        nn.init.ones_(module.weight)
    if module.bias is not None:
        nn.init.zeros_(module.bias)


class UnwrappedPyGNorm(nn.Module):
    """Base of a norm that holds itself the parameters it once kept in a wrapped PyG module ``self.module``:
    checkpoints saved then (``module.weight``, ...) load too, each ``prefix + "module." + name`` key renamed to
    ``prefix + name`` before the usual loading."""

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs) -> None:
        wrapped = prefix + "module."
        for key in [k for k in state_dict if k.startswith(wrapped)]:
            state_dict[prefix + key[len(wrapped) :]] = state_dict.pop(key)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
