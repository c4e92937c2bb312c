"""`environment=atari`: ALE games with the standard DQN preprocessing, through gymnasium or envpool
alike (docs/atari.md); the step that ends a whole game carries its unclipped score."""

from __future__ import annotations

import difflib
import inspect
import os
from typing import Any, Sequence

import dm_env
import gymnasium
import numpy as np

from rl.environments.factories import GymnasiumToDmEnv, register_installed_families
from rl.environments.gymnax_vector import EnvStep
from rl.environments.host import EpisodeCounter, HostVector
from rl.environments.vector import EnvpoolVectorEnvironment


def game_name(name: str) -> str:
    """The game in `name`: `Pong` from `Pong`, `Pong-v5` or `ALE/Pong-v5`."""
    game = str(name).rpartition("/")[2]
    return game[: -len("-v5")] if game.endswith("-v5") else game


def validate_game(name: str) -> str:
    """The game named, or a ValueError with close names when ALE has no such game."""
    game = game_name(name)
    register_installed_families()
    games = sorted(game_name(i) for i in gymnasium.envs.registry if i.startswith("ALE/") and i.endswith("-v5"))
    if not games:
        raise ValueError("ale-py is not installed (pip install ale-py); it ships the Atari ROMs")
    if game in games:
        return game
    close = [g for g in games if g.lower() == game.lower()] or difflib.get_close_matches(game, games, n=5, cutoff=0.5)
    hint = f"did you mean one of {close}?" if close else f"games include {games[:8]}"
    raise ValueError(f"ALE has no game '{game}' (environment.name is the game, e.g. Pong); {hint}")


class EpisodicLife(gymnasium.Wrapper):
    """Ends the episode at a lost life and plays on, resetting the game only when it is over (DQN's)."""

    def __init__(self, env: gymnasium.Env):
        super().__init__(env)
        self._lives = 0
        self._game_over = True

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
        observation, reward, terminated, truncated, info = self.env.step(action)
        self._game_over = terminated or truncated
        lives = self.env.unwrapped.ale.lives()
        if 0 < lives < self._lives:
            terminated = True
        self._lives = lives
        return observation, reward, terminated, truncated, info

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        if self._game_over or seed is not None:
            observation, info = self.env.reset(seed=seed, options=options)
        else:  # A life was lost: continue the game with a no-op step.
            observation, _, terminated, truncated, info = self.env.step(0)
            if terminated or truncated:
                observation, info = self.env.reset(options=options)
        self._lives = self.env.unwrapped.ale.lives()
        self._game_over = False
        return observation, info


def make_atari_environment(
    seed: int,
    name: str = "Pong",
    noop_max: int = 30,
    frame_skip: int = 4,
    screen_size: int = 84,
    frame_stack: int = 4,
    repeat_action_probability: float = 0.25,
    episodic_life: bool = False,
    reward_clip: bool = False,
    full_action_space: bool = False,
    max_episode_steps: int | None = 27_000,  # ALE v5's 108,000 frames at frame skip 4.
    render_mode: str | None = None,
) -> dm_env.Environment:
    """An Atari game as a dm_env, preprocessed by gymnasium's Atari wrappers (`ALE/<game>-v5` at frameskip 1)."""
    for key, value, minimum in (
        ("noop_max", noop_max, 0),
        ("frame_skip", frame_skip, 1),
        ("screen_size", screen_size, 8),
        ("frame_stack", frame_stack, 1),
    ):
        if int(value) < minimum:
            raise ValueError(f"environment.{key} must be >= {minimum}, got {value}")
    if not 0.0 <= float(repeat_action_probability) <= 1.0:
        raise ValueError(f"environment.repeat_action_probability must be in [0, 1], got {repeat_action_probability}")
    if max_episode_steps is not None and int(max_episode_steps) < 1:
        raise ValueError(f"environment.max_episode_steps must be >= 1 or null, got {max_episode_steps}")
    game = validate_game(name)
    frames = None if max_episode_steps is None else int(max_episode_steps) * int(frame_skip)
    environment = gymnasium.make(
        f"ALE/{game}-v5",
        frameskip=1,
        repeat_action_probability=float(repeat_action_probability),
        full_action_space=bool(full_action_space),
        max_num_frames_per_episode=frames,
        render_mode=render_mode,
    )
    environment = gymnasium.wrappers.AtariPreprocessing(
        environment, noop_max=int(noop_max), frame_skip=int(frame_skip), screen_size=int(screen_size), scale_obs=False
    )
    # `info["game_score"]["r"]` where a whole game ends (inside `EpisodicLife` and clipping).
    environment = gymnasium.wrappers.RecordEpisodeStatistics(environment, stats_key="game_score")
    if episodic_life:
        environment = EpisodicLife(environment)
    if reward_clip:
        environment = gymnasium.wrappers.TransformReward(environment, lambda reward: float(np.sign(reward)))
    environment = gymnasium.wrappers.FrameStackObservation(environment, int(frame_stack), padding_type="reset")
    # (frames, H, W) stacks as contiguous (H, W, frames) arrays.
    space = gymnasium.spaces.Box(0, 255, (int(screen_size), int(screen_size), int(frame_stack)), np.uint8)
    environment = gymnasium.wrappers.TransformObservation(
        environment, lambda stack: np.ascontiguousarray(np.moveaxis(stack, 0, -1)), space
    )
    environment.action_space.seed(int(seed))
    return GymnasiumToDmEnv(environment, seed=int(seed))


def atari_settings(settings: dict[str, Any]) -> dict[str, Any]:
    """`make_atari_environment`'s options: its defaults with `settings` over them (an unknown one refused), for the
    backends that preprocess the frames themselves (envpool, ale-py's vector environment)."""
    parameters = inspect.signature(make_atari_environment).parameters
    unknown = set(settings) - set(parameters)
    if unknown:
        raise TypeError(f"unknown Atari options: {', '.join(sorted(unknown))}")
    return {name: p.default for name, p in parameters.items() if p.default is not p.empty} | settings


def make_atari_envpool(seed: int, num_envs: int, **settings: Any) -> EnvpoolVectorEnvironment:
    """`num_envs` copies of the game stepped by envpool, preprocessed as `make_atari_environment(**settings)`."""
    chosen = atari_settings(settings)
    options = {
        "noop_max": int(chosen["noop_max"]),
        "frame_skip": int(chosen["frame_skip"]),
        "img_height": int(chosen["screen_size"]),
        "img_width": int(chosen["screen_size"]),
        "stack_num": int(chosen["frame_stack"]),
        "gray_scale": True,
        "repeat_action_probability": float(chosen["repeat_action_probability"]),
        "episodic_life": bool(chosen["episodic_life"]),
        "reward_clip": bool(chosen["reward_clip"]),
        "full_action_space": bool(chosen["full_action_space"]),
        "use_fire_reset": False,  # So that both backends play the same game.
        "use_inter_area_resize": True,
        "max_episode_steps": 10**9 if chosen["max_episode_steps"] is None else int(chosen["max_episode_steps"]),
        # Not a thread per copy (its default): they fight over a small machine's cores.
        "num_threads": max(1, min(int(num_envs), os.cpu_count() or 1)),
    }
    return EnvpoolVectorEnvironment(f"{game_name(chosen['name'])}-v5", seed, num_envs, atari=True, **options)


def ale_rom(name: str) -> str:
    """ale-py's ROM id of a game (`Pong` -> `pong`, `SpaceInvaders` -> `space_invaders`), checked."""
    game = validate_game(name)
    return "".join(f"_{c.lower()}" if c.isupper() and i else c.lower() for i, c in enumerate(game))


class AleVector(HostVector):
    """Copies of a game in ale-py's vector environment (its C++ threads step them; frame skip, max-pooling,
    grayscale, area resize and frame stacking are its own), with `make_atari_environment`'s settings and the
    frames last. A game over resets the copy within the step (`final_observation` is the ended episode's last
    frames). Episodic life is DQN's: a lost life ends the learner's episode (discount 0) and the game plays on
    (ale-py's own `episodic_life` restarts the game instead); `game_scores` are unclipped whole games."""

    def __init__(self, seeds: Sequence[int], num_threads: int, **settings: Any):
        from ale_py.vector_env import AtariVectorEnv

        chosen = atari_settings(settings)
        self.num_envs = len(seeds)
        self._seeds = np.asarray(seeds, np.int64) % 2**31  # ALE takes C ints.
        self._episodic_life = bool(chosen["episodic_life"])
        self._reward_clip = bool(chosen["reward_clip"])
        steps = chosen["max_episode_steps"]
        self._environment = AtariVectorEnv(
            ale_rom(chosen["name"]),
            self.num_envs,
            num_threads=max(1, min(int(num_threads), self.num_envs)),
            max_num_frames_per_episode=10**9 if steps is None else int(steps) * int(chosen["frame_skip"]),
            repeat_action_probability=float(chosen["repeat_action_probability"]),
            full_action_space=bool(chosen["full_action_space"]),
            autoreset_mode="SameStep",
            img_height=int(chosen["screen_size"]),
            img_width=int(chosen["screen_size"]),
            stack_num=int(chosen["frame_stack"]),
            frameskip=int(chosen["frame_skip"]),
            noop_max=int(chosen["noop_max"]),
            episodic_life=False,
            life_loss_info=self._episodic_life,
            reward_clipping=False,
            use_fire_reset=False,  # As both other backends play it.
        )
        self.episodes = EpisodeCounter(self.num_envs)
        self._game_scores = np.zeros(self.num_envs, np.float64)
        self._ended_scores = np.full(self.num_envs, np.nan)
        self._lives = np.zeros(self.num_envs, np.int32)

    @staticmethod
    def _frames_last(stacks: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(np.moveaxis(stacks, 1, -1))

    def reset(self) -> np.ndarray:
        observations, info = self._environment.reset(seed=self._seeds)
        self._lives = np.asarray(info["lives"], np.int32)
        return self._frames_last(observations)

    def step(self, actions: np.ndarray) -> EnvStep:
        observations, rewards, terminated, truncated, info = self._environment.step(np.asarray(actions, np.int32))
        raw = np.asarray(rewards, np.float32)
        lives = np.asarray(info["lives"], np.int32)
        # With `life_loss_info` a lost life terminates without a reset; a game over resets (lives back up).
        life_lost = terminated & (lives < self._lives) if self._episodic_life else np.zeros_like(terminated)
        game_over = (terminated & ~life_lost) | truncated
        self._lives = lives
        self._game_scores += raw
        self._ended_scores = np.where(game_over, self._game_scores, np.nan)
        self._game_scores[game_over] = 0.0
        reward = np.sign(raw) if self._reward_clip else raw
        done = terminated | truncated
        observation = self._frames_last(observations)
        final = self._frames_last(info["final_obs"]) if done.any() else observation
        episode_return, episode_length = self.episodes.add(reward, done)
        return EnvStep(
            observation=observation,
            reward=reward,
            discount=np.where(terminated, 0.0, 1.0).astype(np.float32),
            done=done,
            truncated=truncated & ~terminated,
            final_observation=final,
            episode_return=episode_return,
            episode_length=episode_length,
        )

    def game_scores(self) -> np.ndarray:
        return self._ended_scores

    def close(self) -> None:
        self._environment.close()
