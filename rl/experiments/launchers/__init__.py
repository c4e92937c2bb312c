"""Launchers: callables that run an Experiment and return its RunSummary."""
