"""Trains an agent: `python scripts/train.py [group=option ...] [key=value ...]` (the
same as `python -m rl.train`; see rl/train.py)."""

from rl.train import cli

if __name__ == "__main__":
    cli()
