"""The compute dtype of a norm, at the path the models import it from; it lives in
:mod:`graphnorm.norms.ops.precision`."""

from graphnorm.norms.ops.precision import HALF_DTYPES, call_in_dtype, cast, compute_dtype, upcast

__all__ = ["HALF_DTYPES", "call_in_dtype", "cast", "compute_dtype", "upcast"]
