"""The norm leaderboard: every registered norm in deep node-level and molecular hosts under one protocol per task
family (``experiments/leaderboard/protocol.yaml``), run through graphnorm's sweeps and shown as one page.

* :mod:`.protocol`, :mod:`.run`, :mod:`.timed`: the protocol's tiers as sweeps, run or resumed (knob tuning on
  validation first, then the grid with the chosen knobs), each run's CPU seconds recorded;
* :mod:`.tables`: the tidy table, one row per run (``family, graph, host, depth, norm, seed, metric, value,
  higher_is_better`` and the last layer's collapse metrics), from the sweep folders;
* :mod:`.statistics`, :mod:`.cd_diagram`: means with confidence intervals, paired tests, Friedman ranks (Demsar 2006);
* :mod:`.estimate`: CPU-hours per part before running it; :mod:`.cell`: one cell re-run against its record;
* :mod:`.page`: ``analysis/questions/leaderboard.md`` from the committed tidy table; :mod:`.cli`: the command.
"""
