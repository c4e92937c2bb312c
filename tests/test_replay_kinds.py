"""Replay kinds are types (rl/replay/kinds.py): each agent's builder holds its kind, made from its
config, and asks it for the items a learner step takes; a continuous agent refuses prioritized replay."""

import pytest

from rl.replay.kinds import Queue, Sequences, Transitions


@pytest.mark.parametrize(
    "agent, kind",
    [
        ("dqn", Transitions),
        ("sac", Transitions),
        ("td3", Transitions),
        ("r2d2", Sequences),
        ("ppo", Queue),
        ("impala", Queue),
    ],
)
def test_each_agent_holds_its_replay_kind(agent, kind):
    import importlib

    builder = importlib.import_module(f"rl.agents.{agent}").make_builder()
    assert type(builder.replay) is kind
    assert builder.replay.config is builder.config


def test_a_learner_step_takes_a_batch_per_sgd_step_or_a_queues_sequences():
    from rl.agents.dqn import make_builder as dqn
    from rl.agents.ppo import make_builder as ppo

    assert dqn(batch_size=8, sgd_steps_per_learner_step=3).samples_per_learner_step == 24
    assert ppo(batch_size=5).samples_per_learner_step == 5


def test_prioritized_is_a_field_and_continuous_agents_refuse_it():
    from rl.agents.dqn import DQNConfig
    from rl.agents.r2d2 import R2D2Config
    from rl.agents.sac import SACConfig

    assert (DQNConfig().prioritized, R2D2Config().prioritized, R2D2Config(prioritized=False).prioritized) == (
        False,
        True,
        False,
    )
    with pytest.raises(ValueError, match="^prioritized must be false: continuous-control agents write no priorities"):
        SACConfig(prioritized=True)
