"""Trains an agent: `python scripts/train.py [group=option ...] [key=value ...]` (the
same as `python -m rl.train`; see rl/train.py)."""

from rl.allocator import reexec_with_jemalloc

if __name__ == "__main__":
    reexec_with_jemalloc()  # Once, before anything heavy is imported (rl/allocator.py: why).

from rl.train import cli  # noqa: E402

if __name__ == "__main__":
    cli()
