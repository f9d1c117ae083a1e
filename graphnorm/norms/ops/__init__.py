"""What the norms are built from, apart from the catalogue of norms itself: the checks of a forward's inputs
(:mod:`~graphnorm.norms.ops.input_checks`), gain and bias (:mod:`~graphnorm.norms.ops.parameters`), the compute
dtype (:mod:`~graphnorm.norms.ops.precision`), per-graph and per-row statistics
(:mod:`~graphnorm.norms.ops.graph_stats`), and ContraNorm's two kernels: the exact negative mix over half of the
tiles (:mod:`~graphnorm.norms.ops.contranorm_symmetric_tiles`) and the linear-time random-feature estimate
(:mod:`~graphnorm.norms.ops.contranorm_random_features`).
"""
