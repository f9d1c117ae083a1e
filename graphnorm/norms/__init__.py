"""Normalization layers for GNNs and graph transformers, each per graph inside mini-batches.

Every norm is an ``nn.Module`` with
``forward(x, batch=None, batch_size=None, edge_index=None, token_mask=None) -> Tensor`` over node-major
features ``x`` of shape ``[num_nodes, channels]``; arguments a norm does not need are ignored.
Create them by name with :func:`build_norm`; :func:`available_norms` lists the names.
"""

from graphnorm.norms.identity import Identity
from graphnorm.norms.mean_subtraction import MeanSubtraction
from graphnorm.norms.registry import available_norms, build_norm, norm_class, norm_keywords, register_norm

__all__ = [
    "available_norms",
    "build_norm",
    "norm_class",
    "norm_keywords",
    "register_norm",
    "Identity",
    "MeanSubtraction",
]
