"""Normalization layers for GNNs and graph transformers, created by name.

Every norm is an ``nn.Module`` with ``forward(x, batch=None, batch_size=None, edge_index=None, token_mask=None)`` over
node-major features ``x`` ``[num_nodes, channels]``, returning a tensor of ``x``'s shape and dtype; arguments a norm
does not need are ignored. Statistics over several nodes are taken per graph of a mini-batch (BatchNorm and
DiffGroupNorm: over the whole batch). Create norms with :func:`build_norm`; :func:`available_norms` lists the names.

One module per norm, the forward they share in :mod:`~graphnorm.norms.base`, names to classes in
:mod:`~graphnorm.norms.registry`, and what norms are built from in :mod:`graphnorm.norms.ops`. Inside someone else's
model (PyG's ``GCN``, ``GAT``, ``GIN``...: their ``norm=`` slot) every norm works as it is; :func:`pass_edge_index`
hands the model's ``edge_index`` to the norms that use it (:mod:`~graphnorm.norms.other_models`).
"""

from graphnorm.norms.ada_norm import AdaNorm
from graphnorm.norms.batch_norm import BatchNorm
from graphnorm.norms.contranorm import ContraNorm, NeighborsNotExcludedWarning
from graphnorm.norms.detach_norm import DetachNorm
from graphnorm.norms.diff_group_norm import DiffGroupNorm
from graphnorm.norms.granola import Granola, GranolaNoEdgesWarning
from graphnorm.norms.graph_norm import GraphNorm
from graphnorm.norms.identity import Identity
from graphnorm.norms.instance_norm import InstanceNorm
from graphnorm.norms.layer_norm import LayerNorm
from graphnorm.norms.layer_norm_simple import LayerNormSimple
from graphnorm.norms.learnable_scaler import LearnableScaler
from graphnorm.norms.mean_subtraction import MeanSubtraction
from graphnorm.norms.node_norm import NodeNorm
from graphnorm.norms.other_models import EdgeIndexHandoff as EdgeIndexHandoff  # the 0.1.0 name
from graphnorm.norms.other_models import (
    EdgeIndexHooks,
    SharedNormWarning,
    UntiedAfterBackwardWarning,
    pass_edge_index,
    untie_norms,
)
from graphnorm.norms.pair_norm import PairNorm
from graphnorm.norms.registry import available_norms, build_norm, norm_class, norm_keywords, register_norm
from graphnorm.norms.rms_norm import RMSNorm
from graphnorm.norms.sep_norm import SepNorm

__all__ = [
    "available_norms",
    "build_norm",
    "norm_class",
    "norm_keywords",
    "register_norm",
    "pass_edge_index",
    "untie_norms",
    "EdgeIndexHooks",
    "GranolaNoEdgesWarning",
    "NeighborsNotExcludedWarning",
    "SharedNormWarning",
    "UntiedAfterBackwardWarning",
    "AdaNorm",
    "BatchNorm",
    "ContraNorm",
    "DetachNorm",
    "DiffGroupNorm",
    "GraphNorm",
    "Granola",
    "Identity",
    "InstanceNorm",
    "LayerNorm",
    "LayerNormSimple",
    "LearnableScaler",
    "MeanSubtraction",
    "NodeNorm",
    "PairNorm",
    "RMSNorm",
    "SepNorm",
]
