"""Models: one import per model."""

from graphnorm.models.gat import DeepGAT
from graphnorm.models.gcn import DeepGCN, GCNBlock
from graphnorm.models.gcnii import GCNII, GCNIIBlock
from graphnorm.models.graphormer import GRAPHORMER_CLIP_NORM, Graphormer, graphormer_optimizer, graphormer_slim

__all__ = [
    "DeepGAT",
    "DeepGCN",
    "GCNBlock",
    "GCNII",
    "GCNIIBlock",
    "Graphormer",
    "graphormer_optimizer",
    "graphormer_slim",
    "GRAPHORMER_CLIP_NORM",
]
