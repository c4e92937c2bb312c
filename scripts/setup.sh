#!/usr/bin/env bash
# Creates .venv with Python 3.11, installs requirements.txt into it and the project itself
# (`pip install -e .`, so `rl` imports from any directory), once; again whenever
# requirements.txt or pyproject.toml changes. Sourced by train.sh and test.sh.
# Rendering (video) needs a headless OpenGL library: EGL or OSMesa. Where neither is
# present and apt-get can install packages (as root), they are installed too.
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

headless_gl() {
  if ldconfig -p 2>/dev/null | grep -q -E 'libEGL\.so\.1|libOSMesa\.so'; then
    return 0
  fi
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "Installing a headless OpenGL backend for rendering (EGL, OSMesa)..." >&2
    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      libegl1 libgl1-mesa-dri libosmesa6 >/dev/null ||
      echo "Could not install libegl1/libosmesa6: video of MuJoCo and dm_control tasks needs one of them." >&2
  else
    echo "No EGL or OSMesa library found: video of MuJoCo and dm_control tasks needs libegl1 or libosmesa6." >&2
  fi
}

wanted="$(cat "$ROOT/requirements.txt" "$ROOT/pyproject.toml" | sha256sum | cut -d' ' -f1)"
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$wanted" ]; then
  python="$(find_python)"
  [ -x "$VENV/bin/python" ] || "$python" -m venv "$VENV"
  "$VENV/bin/python" -m pip install --quiet --upgrade pip
  "$VENV/bin/python" -m pip install --quiet -r "$ROOT/requirements.txt"
  "$VENV/bin/python" -m pip install --quiet --no-deps -e "$ROOT"
  headless_gl
  echo "$wanted" > "$STAMP"
fi
