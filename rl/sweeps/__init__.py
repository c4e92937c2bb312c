"""The searches: grids compiled as one program (grid.py, where their groups train: engines.py, what they show
while they train: progress.py), population-based training (pbt.py, its sweeper's work: pbt_sweep.py), Optuna's
pruning (pruning.py, its sweeper's work: optuna_sweeper.py), a sweep's jobs (jobs.py) and what a sweep found
(results.py). They reach a run only as hooks and data handed to it; no layer below imports them, and
hydra_plugins/ only registers their Hydra front ends."""
