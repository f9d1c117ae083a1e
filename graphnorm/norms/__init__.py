"""Normalization layers for GNNs and graph transformers, each per graph inside mini-batches.

Every norm is an ``nn.Module`` with
``forward(x, batch=None, batch_size=None, edge_index=None, token_mask=None) -> Tensor`` over node-major
features ``x`` of shape ``[num_nodes, channels]``; arguments a norm does not need are ignored.
Create them by name with :func:`build_norm`; :func:`available_norms` lists the names.
"""

from graphnorm.norms.ada_norm import AdaNorm
from graphnorm.norms.batch_norm import BatchNorm
from graphnorm.norms.contranorm import ContraNorm
from graphnorm.norms.detach_norm import DetachNorm
from graphnorm.norms.diff_group_norm import DiffGroupNorm
from graphnorm.norms.graph_norm import GraphNorm
from graphnorm.norms.identity import Identity
from graphnorm.norms.instance_norm import InstanceNorm
from graphnorm.norms.layer_norm import LayerNorm
from graphnorm.norms.layer_norm_simple import LayerNormSimple
from graphnorm.norms.learnable_scaler import LearnableScaler
from graphnorm.norms.mean_subtraction import MeanSubtraction
from graphnorm.norms.node_norm import NodeNorm
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
    "AdaNorm",
    "BatchNorm",
    "ContraNorm",
    "DetachNorm",
    "DiffGroupNorm",
    "GraphNorm",
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
