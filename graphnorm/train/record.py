"""The record of a run: what ``graphnorm.train.run`` returns, a sweep stores in ``results/<run_id>.json`` and its
tables read. Its keys are described here, once (``<m>``: the task's metric, e.g. ``acc``, ``mae``, ``rocauc``):

* ``val_<m>``, ``test_<m>``: at the best-validation epoch (with ``ema_decay``: of the weight average);
  ``val_<m>_last``, ``test_<m>_last``: at the last epoch run; ``best_epoch``; ``epochs_run`` (fewer than ``epochs``
  after early stopping or a time budget); ``train_loss`` (last epoch), ``train_loss_first`` (epoch 0); ``metric``
  (``<m>``), ``num_params``, ``wall_time_s``, and the task's loading facts (``GraphTask.stats``);
* ``history``: the learning curve, one dict per epoch run: node level ``epoch``, ``train_loss``, ``val_loss``,
  ``val_<m>``, ``test_<m>``; graph level ``epoch``, ``step``, ``lr``, ``train_loss``, ``val_<m>``, ``test_<m>``,
  ``train_time_s`` (the training loop's time summed over resumes, what ``max_train_minutes`` limits); a sweep's
  ``epochs.csv``;
* node level: ``num_eval_nodes``, and for classification ``majority_<m>`` (the metric on the same evaluated nodes of
  always predicting the training nodes' most frequent class);
* graph level: ``steps`` (optimizer steps), ``stopped_by_time``, ``resumed_at_epoch`` (``None`` for a run that never
  resumed), ``train_graphs_per_s`` (training throughput over the batch loops, evaluation excluded), and for a model
  with padded inputs ``dropped_graphs_<split>`` (graphs above ``max_nodes`` left out with ``drop_large_graphs``);
* with ``probe``: ``layers`` (collapse metrics at every layer of the final model; a sweep's ``layers.csv``) and
  ``probe_time_s``; with ``probe_every_steps``: :data:`STEPS_KEY` (rows of :data:`STEP_COLUMNS`) and
  ``collapse_steps_time_s``.

Records of equal runs are equal apart from the timings: the keys ending in ``_time_s``, ``train_graphs_per_s`` and
the history's ``train_time_s``.
"""

STEPS_KEY = "collapse_steps"  # the list of collapse-over-training rows (``probe_every_steps``); steps.csv in a sweep
# The first keys of each of those rows (graphnorm.train.collapse_steps), then any other key a probe record has.
STEP_COLUMNS = ("step", "epoch", "layer", "layer_name", "rows", "metric", "stat", "value")
