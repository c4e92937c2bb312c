"""Loggers: terminal, CSV and Weights & Biases sinks plus wrappers that combine them."""

from rl.loggers.aggregators import Dispatcher, TimeFilter, WallTime
from rl.loggers.csv import CSVLogger
from rl.loggers.factory import DefaultLoggerFactory

__all__ = ["CSVLogger", "DefaultLoggerFactory", "Dispatcher", "TimeFilter", "WallTime"]
