"""The record of a run: what ``graphnorm.train.run`` returns, a sweep stores in ``results/<run_id>.json`` and its
tables read, and the names of its collapse-over-training rows.

Every key of a record (the metrics at the best and last epoch, the learning curve, the node- and graph-level facts,
the probe's layers and steps) is described once, in docs/concepts/run-record.md. Records of equal runs are equal
apart from the timings: the keys ending in ``_time_s``, ``train_graphs_per_s`` and the history's ``train_time_s``.
"""

STEPS_KEY = "collapse_steps"  # the list of collapse-over-training rows (``probe_every_steps``); steps.csv in a sweep
# The first keys of each of those rows (graphnorm.train.collapse_steps), then any other key a probe record has.
STEP_COLUMNS = ("step", "epoch", "layer", "layer_name", "rows", "metric", "stat", "value")
