"""Models: one import per model."""

from graphnorm.models.gcn import DeepGCN, GCNBlock

__all__ = ["DeepGCN", "GCNBlock"]
