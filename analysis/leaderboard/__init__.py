"""The norm leaderboard: one protocol for every norm, the grid of runs, their statistics (Demsar 2006) and the page."""
