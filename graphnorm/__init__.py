"""graphnorm: study and cure oversmoothing and dimensional collapse in GNNs and graph transformers."""

from graphnorm import norms
from graphnorm.norms import available_norms, build_norm

__version__ = "0.1.0"

__all__ = ["norms", "available_norms", "build_norm", "__version__"]
