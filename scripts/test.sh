#!/usr/bin/env bash
# Sets up .venv if needed, lints (ruff, rules in pyproject.toml), then runs the test
# suite: bash scripts/test.sh [pytest args...]
# The default run includes one learning test per agent; `-m slow` runs the other seeds.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/setup.sh"
cd "$ROOT"
"$ROOT/.venv/bin/ruff" check
export WANDB_MODE=offline WANDB_SILENT=true TF_CPP_MIN_LOG_LEVEL=2
exec "$ROOT/.venv/bin/python" -m pytest "$@"
