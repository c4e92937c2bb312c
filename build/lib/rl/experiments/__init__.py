"""Experiments: configuration, node builders, the run lifecycle and the launchers."""
