#!/usr/bin/env bash
# Builds a stack's virtual environment with Python 3.11 from its lock file, then installs the project itself
# into it (`pip install --no-deps -e .`, so `rl` imports from any directory); once, and again whenever the lock
# file or pyproject.toml changes. Run by train.sh and test.sh. Quiet unless something fails: pip's output goes to
# <venv>/setup.log, and only a failure prints it (its end, and where the whole log is).
#   bash scripts/setup.sh            the reverb stack: .venv from requirements.txt (everything)
#   bash scripts/setup.sh current    the current stack: .venv-current from requirements-current.txt (newest JAX,
#                                    numpy 2; no reverb, TensorFlow or Ray: launcher=anakin, grids, analysis)
# Rendering (video) needs a headless OpenGL library: EGL or OSMesa. Where neither is present and apt-get can
# install packages (as root), the reverb stack's set-up installs them too.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
case "${1:-reverb}" in
  reverb) VENV="$ROOT/.venv" LOCK="$ROOT/requirements.txt" ;;
  current) VENV="$ROOT/.venv-current" LOCK="$ROOT/requirements-current.txt" ;;
  *) echo "usage: bash scripts/setup.sh [reverb|current] (got '$1')" >&2; exit 2 ;;
esac
STAMP="$VENV/.requirements.sha256"

find_python() {
  for candidate in python3.11 python3 python; do
    if command -v "$candidate" >/dev/null 2>&1 &&
       "$candidate" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' 2>/dev/null; then
      echo "$candidate"; return 0
    fi
  done
  echo "Python 3.11 is required ($(basename "$LOCK") is resolved for it; dm-reverb has no wheels for newer versions)." >&2
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

# pip's output goes to a log in the venv; on success one line says the venv is ready, on a failure the log's
# end is printed with its path.
install_stack() {
  local log="$VENV/setup.log" start=$SECONDS
  echo "Setting up $(basename "$VENV") from $(basename "$LOCK") (once; a few minutes)..." >&2
  : > "$log"
  if ! {
    "$VENV/bin/python" -m pip install --upgrade pip &&
      "$VENV/bin/python" -m pip install -r "$LOCK" &&
      "$VENV/bin/python" -m pip install --no-deps -e "$ROOT"
  } >> "$log" 2>&1; then
    tail -n 40 "$log" >&2
    echo "Setting up $(basename "$VENV") failed: pip's whole output is in $log" >&2
    return 1
  fi
  echo "$(basename "$VENV") is ready ($((SECONDS - start)) s; pip's output: $log)" >&2
}

wanted="$(cat "$LOCK" "$ROOT/pyproject.toml" | sha256sum | cut -d' ' -f1)"
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$wanted" ]; then
  python="$(find_python)"
  [ -x "$VENV/bin/python" ] || "$python" -m venv "$VENV"
  install_stack
  [ "$VENV" != "$ROOT/.venv" ] || headless_gl
  echo "$wanted" > "$STAMP"
fi
