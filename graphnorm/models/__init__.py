"""Models: one file per model, each registered by name (:func:`register_model`); :func:`build_model` builds one for
a task. Importing this package registers the built-in models: gcn, gat, gcnii, gin, graphormer.

Start with :mod:`graphnorm.models.gcn` (DeepGCN); what the message-passing models share is in
:mod:`~graphnorm.models.inputs`, :mod:`~graphnorm.models.readout` and :mod:`~graphnorm.models.initialization`, and
the registry and forward convention in :mod:`~graphnorm.models.registry`.

Every model, with every norm, runs in ``model.to(torch.bfloat16)`` or ``float16`` (float features in that dtype),
forward and backward, on the CPU too: the norms compute their statistics in float32, and the normalized adjacency is
computed in float32 and rounded once (``tests/models/test_half_precision_models.py`` states how close to float32)."""

from graphnorm.models.gat import DeepGAT
from graphnorm.models.gcn import DeepGCN, GCNBlock
from graphnorm.models.gcnii import GCNII, GCNIIBlock
from graphnorm.models.gin import GIN, ConstantReadoutWarning, GINBlock
from graphnorm.models.graphormer import Graphormer, graphormer_slim
from graphnorm.models.registry import (
    ModelSpec,
    available_models,
    build_model,
    forward_adapter,
    model_outputs,
    model_spec,
    register_model,
)

__all__ = [
    "ConstantReadoutWarning",
    "DeepGAT",
    "DeepGCN",
    "GCNBlock",
    "GCNII",
    "GCNIIBlock",
    "GIN",
    "GINBlock",
    "Graphormer",
    "ModelSpec",
    "available_models",
    "build_model",
    "forward_adapter",
    "graphormer_slim",
    "model_outputs",
    "model_spec",
    "register_model",
]
