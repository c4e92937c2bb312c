"""Headless rendering for video: the OpenGL backend MuJoCo reads from `MUJOCO_GL` (EGL or OSMesa),
and one-line errors where none works."""

from __future__ import annotations

import ctypes.util
import os
from typing import Any

HEADLESS_BACKENDS = {"egl": "EGL", "osmesa": "OSMesa"}
# The MUJOCO_GL value `choose_mujoco_gl` set (None: it set none; any other value is the user's).
_chosen: str | None = None


class RenderingError(RuntimeError):
    """An environment cannot render frames here; the message is one line."""


def available_headless_backend() -> str | None:
    """The first headless backend whose library is installed (None: neither)."""
    return next((backend for backend, library in HEADLESS_BACKENDS.items() if ctypes.util.find_library(library)), None)


def choose_mujoco_gl(rendering: bool) -> str | None:
    """Sets `MUJOCO_GL` unless the user has: without a display a headless backend, or "disable" when
    none is installed and nothing renders. Returns the backend MuJoCo will use (None: its choice)."""
    global _chosen
    current = os.environ.get("MUJOCO_GL")
    if current is not None and current != _chosen:
        return current  # The user's choice.
    if current is None and os.environ.get("DISPLAY"):
        return None
    backend = current if current in HEADLESS_BACKENDS else available_headless_backend()
    if backend is None and rendering:
        raise RenderingError(missing_backend_message())
    _chosen = os.environ["MUJOCO_GL"] = backend or "disable"
    return _chosen


def missing_backend_message(detail: str = "") -> str:
    chosen = os.environ.get("MUJOCO_GL")
    if chosen is not None and chosen == _chosen == "disable":
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


def render_fps(environment: Any, default: int = 30) -> int:
    """Frames per second of an environment's video: gymnasium's `render_fps` metadata,
    dm_control's control timestep, or `default`."""
    from rl.environments.factories import FlatDmControlWrapper, GymnasiumToDmEnv

    if isinstance(environment, GymnasiumToDmEnv) and environment.gymnasium_environment.metadata.get("render_fps"):
        return int(round(environment.gymnasium_environment.metadata["render_fps"]))
    if isinstance(environment, FlatDmControlWrapper):
        return max(1, int(round(1.0 / environment.control_timestep())))
    return default
