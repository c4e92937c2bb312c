"""What a search adds to a run without the run knowing the search: a `RunHook` is told when the run starts,
after each evaluation round of a trained policy (not the round at actor step 0) and after each checkpoint
(rl/experiments/lifecycle.py calls them; it imports none). Optuna's pruning is one (rl/sweeps/pruning.py)."""

from __future__ import annotations


class RunHook:
    """Does nothing: a hook overrides what it needs."""

    # True: the hook may end the run early, so by default no checkpoint follows an evaluation round (a run
    # ended early is not resumed).
    may_end_early: bool = False

    def start(self) -> None:
        """The run starts: its nodes are about to."""

    def after_evaluation(self, actor_steps: int, mean_return: float) -> bool:
        """An evaluation round's mean return; True ends the run here (but the last round, which completes it). Never
        the untrained policy's round at actor step 0 (rl/experiments/lifecycle.py's `told_to_hooks`)."""
        return False

    def after_checkpoint(self, path: str) -> None:
        """A checkpoint of the run was written at `path`."""

    def ended_early(self) -> None:
        """The run ended on this hook's word, with no checkpoint: its status is `pruned`."""
