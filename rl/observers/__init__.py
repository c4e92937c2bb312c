"""Observers: watch an environment loop and add metrics to its episode records
(conf/observers/ names them for the command line: `observers=[action_stats,video]`)."""

from rl.observers.action_stats import ActionStatistics
from rl.observers.base import Observer
from rl.observers.video import VideoRecorder

__all__ = ["ActionStatistics", "Observer", "VideoRecorder"]
