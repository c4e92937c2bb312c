"""Agents: one package each, with a config, networks, a builder and a learner."""
