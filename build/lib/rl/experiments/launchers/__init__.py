"""Launchers: callables that run an ExperimentConfig and return its RunSummary."""
