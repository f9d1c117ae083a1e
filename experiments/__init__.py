"""Experiment configs and benchmark scripts (run from the repository root with ``python -m``)."""
