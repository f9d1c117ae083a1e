"""The keys of a run's record: what ``graphnorm.train.run`` returns, a sweep stores in ``results/<run_id>.json``
and its tables read."""

STEPS_KEY = "collapse_steps"  # the list of collapse-over-training rows (``probe_every_steps``); steps.csv in a sweep
