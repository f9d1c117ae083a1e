"""The convolution weight initializations that DeepGCN and DeepGAT offer (their ``init`` argument): PyG's default
(``"glorot"``) or Kipf & Welling's GraphConv initialization (``"kipf"``, :func:`kipf_init`). The models:
:mod:`graphnorm.models.gcn`, :mod:`graphnorm.models.gat`."""

from __future__ import annotations

import math

from torch import nn

INITS = ("glorot", "kipf")


def kipf_init(conv: nn.Module) -> None:
    """``conv.lin.weight`` and ``conv.bias`` uniform in :math:`\\pm 1/\\sqrt{\\text{out}}`, ``out`` the width of the
    layer's output (all heads of a concatenating ``GATConv``): the GraphConv initialization of Kipf & Welling's code
    (ICLR 2017, https://arxiv.org/abs/1609.02907), which the PairNorm and ContraNorm code keep."""
    bound = 1.0 / math.sqrt(conv.lin.weight.size(0))  # [out, in]
    nn.init.uniform_(conv.lin.weight, -bound, bound)
    nn.init.uniform_(conv.bias, -bound, bound)
