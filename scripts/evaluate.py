"""Evaluates a trained run from its newest checkpoint (see rl/evaluation.py):

python scripts/evaluate.py run_dir=DIR [episodes=N] [video=true] [seed=S] [video_path=FILE.mp4]
"""

from rl.evaluation import cli

if __name__ == "__main__":
    cli()
