"""An Optuna sweeper whose trials report every evaluation to a shared study and stop when its pruner
says so (`hydra/sweeper=optuna_pruning`; Hydra's own Optuna sweeper cannot prune)."""
