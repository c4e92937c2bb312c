"""Headless rendering of MuJoCo frames: MuJoCo reads `MUJOCO_GL` once, when it is first imported, so the backend
(EGL or OSMesa, the user's choice first) is chosen before any environment imports it; one-line errors where none
works. Imports nothing heavy: config checks use it."""

from __future__ import annotations

import ctypes.util
import os
from typing import Any

from rl.environments.specs import RenderingError

HEADLESS_BACKENDS = {"egl": "EGL", "osmesa": "OSMesa"}
# The user's MUJOCO_GL, read once when this module is imported: a value other than this one was set here.
USERS_MUJOCO_GL = os.environ.get("MUJOCO_GL")


def available_headless_backend() -> str | None:
    """The first headless backend whose library is installed (None: neither)."""
    return next((backend for backend, library in HEADLESS_BACKENDS.items() if ctypes.util.find_library(library)), None)


def choose_mujoco_gl(rendering: bool) -> None:
    """Sets `MUJOCO_GL` unless the user has: without a display a headless backend, or "disable" when
    none is installed and nothing renders."""
    current = os.environ.get("MUJOCO_GL")
    users = current is not None and current == USERS_MUJOCO_GL
    if users or (current is None and os.environ.get("DISPLAY")):
        return  # The user's choice, or MuJoCo's own with a display.
    backend = current if current in HEADLESS_BACKENDS else available_headless_backend()
    if backend is None and rendering:
        raise RenderingError(missing_backend_message())
    os.environ["MUJOCO_GL"] = backend or "disable"


def missing_backend_message(detail: str = "") -> str:
    chosen = os.environ.get("MUJOCO_GL")
    if chosen == "disable" and chosen != USERS_MUJOCO_GL:
        chosen = None  # Set here because no backend is installed.
    if chosen in HEADLESS_BACKENDS:
        what = f"the OpenGL backend MUJOCO_GL={chosen} ({HEADLESS_BACKENDS[chosen]}) does not work here"
    elif chosen in ("disable", "disabled", "off", "false", "0"):
        what = f"MUJOCO_GL={chosen} turns rendering off; set MUJOCO_GL=egl or MUJOCO_GL=osmesa"
    else:
        what = "no headless OpenGL backend: neither EGL (libegl1) nor OSMesa (libosmesa6) is installed"
    return f"cannot render MuJoCo frames: {what}" + (f" ({detail})" if detail else "")


def render_frame(environment: Any) -> Any:
    """`environment.render()`, with any rendering failure as one `RenderingError` line."""
    try:
        return environment.render()
    except RenderingError:
        raise
    except Exception as error:  # noqa: BLE001 - OpenGL and pygame fail in many ways.
        message = str(error).strip().splitlines()[-1] if str(error).strip() else type(error).__name__
        if "mujoco" in type(error).__module__ or "OpenGL" in type(error).__module__ or "GL" in message:
            raise RenderingError(missing_backend_message(message[:200])) from None
        raise RenderingError(f"the environment cannot render rgb frames ({message[:200]})") from None
