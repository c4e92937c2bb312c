#!/usr/bin/env bash
# Tests both stacks: bash scripts/test.sh [pytest args...]
#   1. lints and checks formatting (ruff, rules in pyproject.toml) and the layers of rl/ (lint-imports: the
#      import-linter contracts in pyproject.toml, docs/architecture.md "Layers") in .venv;
#   2. the reverb stack: .venv (requirements.txt, built first if needed): the suite but the tests marked `current`,
#      -m "not slow and not current";
#   3. the current stack: .venv-current (requirements-current.txt, built first if needed): every test that needs
#      no reverb, TensorFlow or Ray, -m "not reverb and not slow" (pytest.ini, "reverb" and "current").
# RL_STACKS=reverb or RL_STACKS=current runs one part only (default: both). The pytest arguments go to each part;
# a `-m EXPR` of theirs becomes `-m "(EXPR) and not current"` in the reverb part and `-m "(EXPR) and not reverb"`
# in the current part. The default run includes one
# learning test per agent; `-m slow` runs the other seeds. A part that selects no test passes (and says so) as long
# as the other one ran some; each part's time and outcome are printed at the end.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
STACKS="${RL_STACKS:-both}"
case "$STACKS" in
  both | reverb | current) ;;
  *) echo "RL_STACKS must be reverb, current or both (got '$STACKS')" >&2; exit 2 ;;
esac
bash "$ROOT/scripts/setup.sh"  # ruff lives in .venv, whichever part runs.
[ "$STACKS" = reverb ] || bash "$ROOT/scripts/setup.sh" current
cd "$ROOT"
"$ROOT/.venv/bin/ruff" check
"$ROOT/.venv/bin/ruff" format --check --quiet
# An import up a layer or a circle between two modules of a package fails here, the import named.
PYTHONPATH="$ROOT" "$ROOT/.venv/bin/lint-imports" --no-cache --no-logo
export WANDB_MODE=offline WANDB_SILENT=true TF_CPP_MIN_LOG_LEVEL=2

# Each part's arguments: the caller's, with their marker expression narrowed to tests without reverb in the
# current part.
reverb_args=()
current_args=()
marked=""
while [ $# -gt 0 ]; do
  case "$1" in
    -m) marked="${2:-}"; shift; [ $# -eq 0 ] || shift ;;
    -m?*) marked="${1#-m}"; shift ;;
    *) reverb_args+=("$1"); current_args+=("$1"); shift ;;
  esac
done
if [ -n "$marked" ]; then
  reverb_args+=(-m "($marked) and not current")
  current_args+=(-m "($marked) and not reverb")
else
  reverb_args+=(-m "not slow and not current")
  current_args+=(-m "not reverb and not slow")
fi

# Runs pytest in a venv, under the allocator the runs use there (jemalloc where one is found, preloaded as the
# entry points re-execute themselves with it: rl/allocator.py; RL_ALLOCATOR=system opts out).
run_part() {
  local venv="$1"; shift
  local preload
  preload="$("$venv/bin/python" -m rl.allocator)"
  LD_PRELOAD="$preload" "$venv/bin/python" -m pytest "$@"
}

summary=()
status=0
ran=0
part() {
  local name="$1" venv="$2"; shift 2
  local start=$SECONDS code=0
  echo "=== the $name stack ($(basename "$venv")): pytest $*"
  run_part "$venv" "$@" || code=$?
  local elapsed=$((SECONDS - start))
  case "$code" in
    0) ran=$((ran + 1)); summary+=("$name part ($(basename "$venv")): passed in ${elapsed} s") ;;
    5) summary+=("$name part ($(basename "$venv")): no test selected (${elapsed} s)") ;;
    *) status=1; summary+=("$name part ($(basename "$venv")): FAILED (pytest exit $code) in ${elapsed} s") ;;
  esac
}

if [ "$STACKS" != current ]; then
  part reverb "$ROOT/.venv" "${reverb_args[@]}"
fi
if [ "$STACKS" != reverb ]; then
  part current "$ROOT/.venv-current" "${current_args[@]}"
fi
printf '%s\n' "${summary[@]}"
if [ "$status" = 0 ] && [ "$ran" = 0 ]; then
  echo "no test selected in any part" >&2
  exit 5
fi
exit "$status"
