"""The norm leaderboard: every registered norm in deep node-level and molecular hosts under one protocol per task
family (``experiments/leaderboard/protocol.yaml``), run through graphnorm's sweeps and shown as one page.

* :mod:`.protocol`: the protocol and its tiers, read and turned into sweep configs (knob tuning, then the grid);
* :mod:`.run`: runs or resumes a tier (tuning first, the chosen knobs fixed, then the grid);
* :mod:`.tables`: the tidy table, one row per run (``family, graph, host, depth, norm, seed, metric, value,
  higher_is_better`` and the last layer's collapse metrics), from the sweep folders;
* :mod:`.estimate`: CPU-hours per part before running it;
* :mod:`.page`: ``analysis/questions/leaderboard.md`` from the committed tidy table.
"""
