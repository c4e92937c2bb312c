"""The returns that normalise a task's scores (rl/analysis/aggregates.py, scripts/plot.py --aggregate): 0 for a
uniformly random policy, 1 for the return that counts as solving it (classic control and MuJoCo) or, for Atari, a
professional human tester's (the field's human-normalised score). `--score-range ENV=LOW,HIGH` adds or replaces one."""

from __future__ import annotations

# A random policy's mean return measured here; solved: Gymnasium's reward_threshold (or a preset's `threshold`).
CLASSIC_CONTROL: dict[str, tuple[float, float]] = {
    "CartPole-v1": (22.7, 475.0),
    "cartpole_masked": (22.7, 475.0),
    "Acrobot-v1": (-494.2, -100.0),
    "MountainCar-v0": (-200.0, -110.0),
    "Pendulum-v1": (-1207.6, -200.0),
}

# Gymnasium's MuJoCo v5 tasks. Random: uniformly random actions, the mean of 10 episodes (seeds 0-9), measured
# here with gymnasium 1.3 and mujoco 3.17. Solved: Gymnasium's reward_threshold; Walker2d and Humanoid have none,
# so 1 is RL Baselines3 Zoo's SAC (Walker2d-v3 at 1 M steps, Humanoid-v3 at 2 M; its benchmark.md). HumanoidStandup
# has neither: it is normalised only with --score-range.
MUJOCO: dict[str, tuple[float, float]] = {
    "Ant-v5": (-140.1, 6000.0),
    "HalfCheetah-v5": (-262.8, 4800.0),
    "Hopper-v5": (17.0, 3800.0),
    "Humanoid-v5": (117.8, 6232.3),
    "InvertedDoublePendulum-v5": (44.6, 9100.0),
    "InvertedPendulum-v5": (5.2, 950.0),
    "Pusher-v5": (-146.5, 0.0),
    "Reacher-v5": (-43.8, -3.75),
    "Swimmer-v5": (9.4, 360.0),
    "Walker2d-v5": (4.3, 3863.2),
}
# HumanoidStandup-v5's random return, for a --score-range of one's own: 32,458.9 (as above).

# Atari 57, by ALE's names (environment.name): random and human scores of Mnih et al. (2015), the games added
# since from Badia et al. (2020, Agent57), as DQN Zoo tabulates them; each game's evaluation starts after up to 30
# no-ops and lasts at most 108,000 frames.
ATARI: dict[str, tuple[float, float]] = {
    "Alien": (227.8, 7127.7),
    "Amidar": (5.8, 1719.5),
    "Assault": (222.4, 742.0),
    "Asterix": (210.0, 8503.3),
    "Asteroids": (719.1, 47388.7),
    "Atlantis": (12850.0, 29028.1),
    "BankHeist": (14.2, 753.1),
    "BattleZone": (2360.0, 37187.5),
    "BeamRider": (363.9, 16926.5),
    "Berzerk": (123.7, 2630.4),
    "Bowling": (23.1, 160.7),
    "Boxing": (0.1, 12.1),
    "Breakout": (1.7, 30.5),
    "Centipede": (2090.9, 12017.0),
    "ChopperCommand": (811.0, 7387.8),
    "CrazyClimber": (10780.5, 35829.4),
    "Defender": (2874.5, 18688.9),
    "DemonAttack": (152.1, 1971.0),
    "DoubleDunk": (-18.6, -16.4),
    "Enduro": (0.0, 860.5),
    "FishingDerby": (-91.7, -38.7),
    "Freeway": (0.0, 29.6),
    "Frostbite": (65.2, 4334.7),
    "Gopher": (257.6, 2412.5),
    "Gravitar": (173.0, 3351.4),
    "Hero": (1027.0, 30826.4),
    "IceHockey": (-11.2, 0.9),
    "Jamesbond": (29.0, 302.8),
    "Kangaroo": (52.0, 3035.0),
    "Krull": (1598.0, 2665.5),
    "KungFuMaster": (258.5, 22736.3),
    "MontezumaRevenge": (0.0, 4753.3),
    "MsPacman": (307.3, 6951.6),
    "NameThisGame": (2292.3, 8049.0),
    "Phoenix": (761.4, 7242.6),
    "Pitfall": (-229.4, 6463.7),
    "Pong": (-20.7, 14.6),
    "PrivateEye": (24.9, 69571.3),
    "Qbert": (163.9, 13455.0),
    "Riverraid": (1338.5, 17118.0),
    "RoadRunner": (11.5, 7845.0),
    "Robotank": (2.2, 11.9),
    "Seaquest": (68.4, 42054.7),
    "Skiing": (-17098.1, -4336.9),
    "Solaris": (1236.3, 12326.7),
    "SpaceInvaders": (148.0, 1668.7),
    "StarGunner": (664.0, 10250.0),
    "Surround": (-10.0, 6.5),
    "Tennis": (-23.8, -8.3),
    "TimePilot": (3568.0, 5229.2),
    "Tutankham": (11.4, 167.6),
    "UpNDown": (533.4, 11693.2),
    "Venture": (0.0, 1187.5),
    "VideoPinball": (16256.9, 17667.9),
    "WizardOfWor": (563.5, 4756.5),
    "YarsRevenge": (3092.9, 54576.9),
    "Zaxxon": (32.5, 9173.3),
}

SCORE_RANGES: dict[str, tuple[float, float]] = {**CLASSIC_CONTROL, **MUJOCO, **ATARI}
