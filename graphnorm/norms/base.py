"""The forward every norm shares, :class:`NormBase`: a norm subclass holds only its math, ``_normalize``.

A call ``norm(x, batch=None, batch_size=None, edge_index=None, token_mask=None)`` runs, in order: the check of the
instance's positions in the model being run (first call only, :func:`~graphnorm.norms.other_models.warn_if_shared`);
the host's ``edge_index`` under :func:`~graphnorm.norms.other_models.pass_edge_index` when the call has none; the input
checks (:meth:`NormBase._check_inputs`); a copy of an empty ``x`` as the output; ``x`` in float32 when it is half
precision (:mod:`~graphnorm.norms.ops.precision`); ``_normalize``; the result back in ``x``'s dtype.
``_normalize(x, batch, batch_size)`` receives ``edge_index`` and ``token_mask`` too where its signature names them.
"""

from __future__ import annotations

import inspect
from typing import ClassVar

from torch import Tensor, nn

from graphnorm.norms.ops.input_checks import check_norm_inputs
from graphnorm.norms.ops.precision import upcast
from graphnorm.norms.other_models import CHECKED_ATTRIBUTE, handed_edge_index, warn_if_shared

OPTIONAL_INPUTS = ("edge_index", "token_mask")  # passed to _normalize only where its signature names them


class NormBase(nn.Module):
    """Base of every norm: ``forward`` does what all norms do around the subclass's ``_normalize``.

    Class attributes a subclass may set:
        per_graph: the norm indexes per-graph statistics by ``batch``, so ``batch_size`` and the graph ids are
            checked too (default False; a property where it depends on the norm's options).
        computes_in_float32: half-precision ``x`` goes to ``_normalize`` in float32 and the result is rounded back
            (default True); False for a norm that hands ``x`` on as it is (Identity, SepNorm's inner norms).
        centers_each_graph: every graph's mean output row is the same whatever the input and the parameters (the
            graph's mean removed, at most a learned shift added back), so a mean or sum readout right after the
            norm sees nothing of the graph (default False; a property where it depends on the norm's options).
    """

    channels: int
    per_graph: ClassVar[bool] = False
    centers_each_graph: ClassVar[bool] = False
    computes_in_float32: ClassVar[bool] = True
    _optional_inputs: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        parameters = inspect.signature(cls._normalize).parameters
        cls._optional_inputs = tuple(name for name in OPTIONAL_INPUTS if name in parameters)

    def forward(
        self,
        x: Tensor,
        batch: Tensor | None = None,
        batch_size: int | None = None,
        edge_index: Tensor | None = None,
        token_mask: Tensor | None = None,
    ) -> Tensor:
        if not self.__dict__.get(CHECKED_ATTRIBUTE, False):
            self.__dict__[CHECKED_ATTRIBUTE] = True
            warn_if_shared(self)
        if edge_index is None and "edge_index" in self._optional_inputs:
            edge_index = handed_edge_index(self, x)
        self._check_inputs(x, batch, batch_size, edge_index)
        if x.size(0) == 0:
            return x.clone()
        optional = {"edge_index": edge_index, "token_mask": token_mask}
        extra = {name: optional[name] for name in self._optional_inputs}
        wide = upcast(x) if self.computes_in_float32 else x
        return self._normalize(wide, batch, batch_size, **extra).to(x.dtype)

    def _normalize(self, x: Tensor, batch: Tensor | None, batch_size: int | None) -> Tensor:
        """The norm of checked, non-empty ``x`` in its compute dtype (float32 or float64)."""
        raise NotImplementedError(f"{type(self).__name__} defines no _normalize")

    def _check_inputs(self, x: Tensor, batch: Tensor | None, batch_size: int | None, edge_index: Tensor | None) -> None:
        """The checks before anything is computed (:func:`~graphnorm.norms.ops.input_checks.check_norm_inputs`);
        a norm with more inputs to check extends them."""
        check_norm_inputs(x, batch, batch_size, self.channels, self._where, per_graph=self.per_graph)

    @property
    def _where(self) -> str:
        """The name error messages start with: the registered name (the class name before registration)."""
        return getattr(type(self), "registry_name", type(self).__name__)

    def reset_parameters(self) -> None:
        """Reset every child that has ``reset_parameters`` (PyG hosts call it on their norms); a norm with
        parameters of its own overrides it."""
        for child in self.children():
            reset = getattr(child, "reset_parameters", None)
            if callable(reset):
                reset()
