#!/usr/bin/env bash
# Creates .venv with Python 3.11 and installs requirements.txt into it (once; again
# whenever requirements.txt changes). Sourced by train.sh and test.sh.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
STAMP="$VENV/.requirements.sha256"

find_python() {
  for candidate in python3.11 python3 python; do
    if command -v "$candidate" >/dev/null 2>&1 &&
       "$candidate" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' 2>/dev/null; then
      echo "$candidate"; return 0
    fi
  done
  echo "Python 3.11 is required (dm-reverb has no wheels for newer versions)." >&2
  return 1
}

wanted="$(sha256sum "$ROOT/requirements.txt" | cut -d' ' -f1)"
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$wanted" ]; then
  python="$(find_python)"
  [ -x "$VENV/bin/python" ] || "$python" -m venv "$VENV"
  "$VENV/bin/python" -m pip install --quiet --upgrade pip
  "$VENV/bin/python" -m pip install --quiet -r "$ROOT/requirements.txt"
  echo "$wanted" > "$STAMP"
fi
