"""The dtype a norm computes in: float16 / bfloat16 input in float32, every other dtype in its own.

As ``F.layer_norm`` does: half-precision sums of squares overflow past 65504 (float16) or keep 8 mantissa bits
(bfloat16), so the statistics are computed in float32 and only the result is rounded back to ``x``'s dtype. The
parameters and running statistics take part in that compute dtype whatever their own (:func:`cast`,
:func:`call_in_dtype`), so a float32 norm accepts half input and a ``.half()`` norm accepts half or float32 input.
``tests/norms/test_half_precision.py`` states how close the half output is to the float32 one.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.func import functional_call

HALF_DTYPES = (torch.float16, torch.bfloat16)


def compute_dtype(x: Tensor) -> torch.dtype:
    """The dtype a norm computes in: float32 for float16 / bfloat16 ``x`` (as ``F.layer_norm`` does), else ``x``'s."""
    return torch.float32 if x.dtype in HALF_DTYPES else x.dtype


def upcast(x: Tensor) -> Tensor:
    """``x`` in :func:`compute_dtype`: a float32 copy (differentiable) for half precision, ``x`` itself otherwise."""
    return x.float() if x.dtype in HALF_DTYPES else x  # a dtype test: cheaper than a no-op Tensor.to on every call


def cast(tensor: Tensor | None, dtype: torch.dtype) -> Tensor | None:
    """A parameter in the compute dtype (differentiable; the tensor itself when it already has it), None stays."""
    return tensor if tensor is None or tensor.dtype == dtype else tensor.to(dtype)


def call_in_dtype(module: nn.Module, dtype: torch.dtype, *args: Tensor) -> Tensor:
    """``module(*args)`` with the module's floating-point parameters and buffers in ``dtype``.

    For a wrapped torch module (e.g. ``BatchNorm1d``) whose parameters are float16 while the statistics are computed
    in float32: the parameters are cast differentiably (gradients reach the originals) and updated running
    statistics are written back into the module's own buffers. Without a cast it is a plain ``module(*args)``.
    Listing the module's tensors costs time at every call: callers test one tensor's dtype first.
    """
    tensors = dict(module.named_parameters()) | dict(module.named_buffers())
    to_cast = {name for name, t in tensors.items() if t.is_floating_point() and t.dtype != dtype}
    if not to_cast:
        return module(*args)
    casted = {name: t.to(dtype) if name in to_cast else t for name, t in tensors.items()}
    out = functional_call(module, casted, args)
    with torch.no_grad():
        for name, buffer in module.named_buffers():
            if name in to_cast:
                buffer.copy_(casted[name])
    return out
