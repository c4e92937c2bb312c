#!/usr/bin/env bash
# Sets up .venv if needed, then trains: bash scripts/train.sh [hydra overrides...]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/setup.sh"
cd "$ROOT"
exec "$ROOT/.venv/bin/python" scripts/train.py "$@"
