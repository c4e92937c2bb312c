"""Environments by name: every installed family resolves, misspellings suggest ids of the same family."""

from __future__ import annotations

import re

import pytest

from conftest import read_summary, run_train
from rl.environments.factories import environment_family, register_installed_families, validate_gymnasium_id


def _suggestions(name: str) -> list[str]:
    with pytest.raises(ValueError) as error:
        validate_gymnasium_id(name)
    message = str(error.value)
    assert message.startswith(f"'{name}' is not a registered gymnasium environment; did you mean one of ")
    return re.findall(r"'([^']+)'", message.split(";", 1)[1])


@pytest.mark.reverb
def test_installed_families_register_and_suggestions_come_from_the_same_family():
    validate_gymnasium_id("ALE/Pong-v5")  # ale_py is installed: its ids resolve without importing it first.
    assert "ale_py" in register_installed_families()
    assert environment_family("ALE/Pong-v5") == "ALE"
    assert environment_family("HalfCheetah-v5") == "gymnasium.envs.mujoco"
    ale = _suggestions("ALE/Pongg-v5")
    assert ale[0] == "ALE/Pong-v5" and all(name.startswith("ALE/") for name in ale)
    assert _suggestions("Pong-v5")[0] == "ALE/Pong-v5"  # The id without its namespace.
    classic = _suggestions("CartPol-v1")
    assert classic[0] == "CartPole-v1" and all(
        environment_family(name) == "gymnasium.envs.classic_control" for name in classic
    )
    mujoco = _suggestions("HalfCheeta-v5")
    assert mujoco[0] == "HalfCheetah-v5" and all(environment_family(name) == "gymnasium.envs.mujoco" for name in mujoco)
    with pytest.raises(ValueError, match=r"there is no 'XYZ' namespace \(installed namespaces: \[.*'ALE'"):
        validate_gymnasium_id("XYZ/Pong-v5")


@pytest.mark.reverb
def test_an_atari_game_trains_by_its_gymnasium_id(run_dir):
    result = run_train(
        [
            "environment=gymnasium",
            "environment.name=ALE/Pong-v5",
            "environment.max_episode_steps=100",
            "agent=dqn",
            "network=atari_cnn",  # Its raw frames are pixels: an MLP is refused (tests/test_atari.py).
            "max_actor_steps=200",
            "eval_episodes=1",
            "checkpoint=false",
            "progress=false",
            f"hydra.run.dir={run_dir}",
        ],
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    summary = read_summary(run_dir)
    assert summary["environment"] == "ALE/Pong-v5" and summary["actor_steps"] == 200
    assert "Powered by Stella" not in result.stdout + result.stderr  # ALE's banner is silenced.
