"""Benchmarks: ``python -m experiments.benchmarks.<name> [--quick] [--out DIR]``; shared helpers in ``_common``."""
