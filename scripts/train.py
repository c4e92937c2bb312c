"""Trains an agent: `python scripts/train.py [group=option ...] [key=value ...]` (the
same as `python -m rl.train`; see rl/train.py, whose `cli` re-executes under jemalloc)."""

from rl.train import cli

if __name__ == "__main__":
    cli()
