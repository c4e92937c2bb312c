import os

import dm_env
import numpy as np
import pytest
from dm_env import specs

from rl.environments import make_gymnasium_environment
from rl.core import is_discrete, make_environment_spec


def test_cartpole_spec_is_float32_with_discrete_actions():
    spec = make_environment_spec(make_gymnasium_environment("CartPole-v1", seed=0))
    assert spec.observations.shape == (4,) and spec.observations.dtype == np.float32
    assert is_discrete(spec.actions) and spec.actions.num_values == 2
    assert spec.discounts.dtype == np.float32


def test_pendulum_actions_are_bounded_continuous():
    spec = make_environment_spec(make_gymnasium_environment("Pendulum-v1", seed=0))
    assert isinstance(spec.actions, specs.BoundedArray) and not is_discrete(spec.actions)
    np.testing.assert_allclose(spec.actions.minimum, [-2.0])
    np.testing.assert_allclose(spec.actions.maximum, [2.0])


def _run_to_end(environment, action=0):
    timestep = environment.reset()
    assert timestep.first()
    steps = 0
    while not timestep.last():
        timestep = environment.step(action)
        steps += 1
    return timestep, steps


def test_termination_has_discount_zero():
    # Pushing left forever topples the pole: a true termination.
    timestep, steps = _run_to_end(make_gymnasium_environment("CartPole-v1", seed=0))
    assert steps < 500
    assert timestep.step_type == dm_env.StepType.LAST and timestep.discount == 0.0


def test_truncation_has_discount_one():
    environment = make_gymnasium_environment("CartPole-v1", seed=0, max_episode_steps=5)
    timestep, steps = _run_to_end(environment)
    assert steps == 5 and timestep.discount == 1.0 and timestep.last()


def test_step_after_last_starts_a_new_episode():
    environment = make_gymnasium_environment("CartPole-v1", seed=0, max_episode_steps=2)
    _run_to_end(environment)
    assert environment.step(0).first()


def test_same_seed_same_trajectory_different_seed_differs():
    def observations(seed):
        environment = make_gymnasium_environment("CartPole-v1", seed=seed)
        first = environment.reset().observation
        second = environment.reset().observation  # Later resets continue the seeded stream.
        return np.concatenate([first, second])

    np.testing.assert_array_equal(observations(7), observations(7))
    assert not np.array_equal(observations(7), observations(8))
    assert not np.array_equal(observations(2**32 - 1), observations(7))


def test_unknown_id_names_close_matches():
    with pytest.raises(ValueError, match="CartPole-v1"):
        make_gymnasium_environment("CartPol-v1", seed=0)


# Video from every family that renders headless: gymnasium's classic control (pygame),
# gymnasium's MuJoCo tasks and dm_control (MuJoCo's EGL or OSMesa backend).
VIDEO_ENVIRONMENTS = {
    "CartPole-v1": ("rl.environments:make_gymnasium_environment", {"name": "CartPole-v1"}),
    "Pendulum-v1": ("rl.environments:make_gymnasium_environment", {"name": "Pendulum-v1"}),
    "HalfCheetah-v5": ("rl.environments:make_mujoco_environment", {"name": "HalfCheetah-v5"}),
    "cheetah-run": ("rl.environments:make_dm_control_environment", {"domain": "cheetah", "task": "run"}),
}


@pytest.mark.reverb
@pytest.mark.parametrize("name", list(VIDEO_ENVIRONMENTS))
def test_each_family_records_an_mp4_headless_or_names_the_missing_backend(name, tmp_path, monkeypatch):
    import importlib

    import imageio_ffmpeg

    from rl.environments.rendering import available_headless_backend
    from rl.environments.specs import RenderingError
    from rl.environments.vector import VectorEnvironment
    from rl.observers import VideoRecorder

    monkeypatch.setenv("SDL_VIDEODRIVER", "dummy")
    module, function = VIDEO_ENVIRONMENTS[name][0].split(":")
    factory = getattr(importlib.import_module(module), function)
    mujoco = name in ("HalfCheetah-v5", "cheetah-run")
    if mujoco and available_headless_backend() is None and "MUJOCO_GL" not in os.environ:
        with pytest.raises(RenderingError, match=r"^cannot render MuJoCo frames: no headless OpenGL backend") as error:
            factory(seed=0, render_mode="rgb_array", **VIDEO_ENVIRONMENTS[name][1])
        assert "\n" not in str(error.value)
        return
    environment = VectorEnvironment([factory(seed=0, render_mode="rgb_array", **VIDEO_ENVIRONMENTS[name][1])])
    recorder = VideoRecorder(every=1, run_directory=str(tmp_path), label="evaluator", instance=0)
    try:
        timestep = environment.reset()
        recorder.observe_first(environment, timestep, np.arange(1))
        action = np.zeros((1, *environment.action_spec().shape), environment.action_spec().dtype)
        for _ in range(5):
            recorder.observe(environment, environment.step(action), action, np.arange(1))
        video = recorder.get_metrics(0)["video"]
    finally:
        environment.close()
    frames, seconds = imageio_ffmpeg.count_frames_and_secs(video)
    assert frames == 6 and seconds > 0  # The first frame and five steps.
    reader = imageio_ffmpeg.read_frames(video)
    next(reader)  # Metadata.
    first = np.frombuffer(next(reader), np.uint8)
    reader.close()
    assert first.max() > first.min()  # A picture, not a blank frame.


@pytest.mark.reverb
def test_mujoco_models_load_without_the_known_deprecation_warning_and_other_warnings_pass(capfd):
    import mujoco

    from rl.environments import make_dm_control_environment, make_mujoco_environment
    from rl.library_output import known_warnings_dropped

    make_mujoco_environment(seed=0).close()
    make_dm_control_environment(seed=0).close()
    captured = capfd.readouterr()
    assert "settotalmass" not in captured.out + captured.err

    seen = []
    previous = mujoco.get_mju_user_warning()
    mujoco.set_mju_user_warning(seen.append)
    try:
        with known_warnings_dropped():
            mujoco.MjModel.from_xml_string(
                '<mujoco><compiler settotalmass="3"/><worldbody><body><geom size="1"/></body></worldbody></mujoco>'
            )
            mujoco.get_mju_user_warning()("Nan, Inf or huge value in QACC at DOF 0.")  # Any other warning.
        assert seen == ["Nan, Inf or huge value in QACC at DOF 0."]
        assert mujoco.get_mju_user_warning() is not None  # The hook in place before is back.
        mujoco.get_mju_user_warning()("after")
        assert seen[-1] == "after"
    finally:
        mujoco.set_mju_user_warning(previous)


@pytest.mark.reverb
@pytest.mark.parametrize("factory_name", ["make_mujoco_environment", "make_dm_control_environment"])
def test_without_a_headless_backend_rendering_fails_in_one_line_naming_what_to_install(factory_name, monkeypatch):
    import rl.environments as environments
    from rl.environments import rendering
    from rl.environments.specs import RenderingError

    monkeypatch.delenv("MUJOCO_GL", raising=False)
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.setattr(rendering, "available_headless_backend", lambda: None)
    with pytest.raises(RenderingError) as error:
        getattr(environments, factory_name)(seed=0, render_mode="rgb_array")
    assert str(error.value) == (
        "cannot render MuJoCo frames: no headless OpenGL backend: neither EGL (libegl1) nor OSMesa (libosmesa6) "
        "is installed"
    )
    # A backend that is named but does not work is named in the message.
    monkeypatch.setenv("MUJOCO_GL", "osmesa")
    assert rendering.missing_backend_message("libOSMesa.so: cannot open shared object file") == (
        "cannot render MuJoCo frames: the OpenGL backend MUJOCO_GL=osmesa (OSMesa) does not work here "
        "(libOSMesa.so: cannot open shared object file)"
    )
