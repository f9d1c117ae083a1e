"""The norm leaderboard's protocol (``protocol.yaml``) and its command, ``python -m experiments.leaderboard``: run or
resume a tier, estimate its CPU-hours, re-run one cell, build the page. The code lives in ``analysis/leaderboard/``."""
