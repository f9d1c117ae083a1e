"""Normalization layers for GNNs and graph transformers, each per graph inside mini-batches.

Every norm is an ``nn.Module`` with
``forward(x, batch=None, batch_size=None, edge_index=None, token_mask=None) -> Tensor`` over node-major
features ``x`` of shape ``[num_nodes, channels]``; arguments a norm does not need are ignored.
Create them by name with :func:`build_norm`; :func:`available_norms` lists the names.

Dtypes: the output has ``x``'s dtype. float16 / bfloat16 input is computed in float32 (as ``F.layer_norm`` does:
half-precision sums of squares overflow past 65504 or keep 8 bits) and only the result is rounded, so it matches
the float32 output to about the dtype's rounding (``tests/test_half_precision.py`` states the bound). Parameters and
running statistics take part in that compute dtype whatever their own, so a float32 norm accepts half input and a
``.half()`` norm accepts half or float32 input; float32 and float64 input are computed in their own dtype.

Inputs: ``batch`` must be an integer tensor ``[num_nodes]`` (``TypeError`` / ``ValueError`` otherwise); norms that
gather per-graph statistics also reject negative ids and ids ``>= batch_size`` (``ValueError``); ids need not be
sorted. NaN and Inf in ``x`` are not checked (that would synchronize the device at every layer): they propagate to
the outputs that depend on them (the row, the graph or its channel, or the batch, depending on the norm), and so
do entries whose squares overflow the compute dtype (above ~1e154 in float64, ~1e19 in float32) in the norms that
square them.
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
