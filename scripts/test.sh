#!/usr/bin/env bash
# Sets up .venv if needed, lints and checks formatting (ruff, rules in pyproject.toml), then runs the test
# suite: bash scripts/test.sh [pytest args...]
# The default run includes one learning test per agent; `-m slow` runs the other seeds.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/setup.sh"
cd "$ROOT"
"$ROOT/.venv/bin/ruff" check
"$ROOT/.venv/bin/ruff" format --check --quiet
export WANDB_MODE=offline WANDB_SILENT=true TF_CPP_MIN_LOG_LEVEL=2
# The tests run under the allocator the runs use: jemalloc, preloaded here as the entry
# points re-execute themselves with it (rl/allocator.py); RL_ALLOCATOR=system opts out.
preload="$("$ROOT/.venv/bin/python" -m rl.allocator)"
if [ -n "$preload" ]; then export LD_PRELOAD="$preload"; fi
exec "$ROOT/.venv/bin/python" -m pytest "$@"
