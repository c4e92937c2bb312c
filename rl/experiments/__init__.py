"""Experiments: configuration, node builders and the run contract (the lifecycle, `Launcher`) that the launchers
above them (rl/local, rl/ray, rl/anakin, rl/sebulba) share."""
