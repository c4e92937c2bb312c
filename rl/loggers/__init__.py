"""Loggers: terminal, CSV and Weights & Biases sinks plus wrappers that combine them."""

from rl.loggers.aggregators import ConstantFields, Dispatcher, TimeFilter, WallTime
from rl.loggers.base import Logger, LoggerFactory, LoggingData, NoOpLogger
from rl.loggers.csv import CSVLogger
from rl.loggers.factory import DefaultLoggerFactory
from rl.loggers.terminal import TerminalLogger
from rl.loggers.wandb import WandbLogger, WandbRun

__all__ = [
    "CSVLogger",
    "ConstantFields",
    "DefaultLoggerFactory",
    "Dispatcher",
    "Logger",
    "LoggerFactory",
    "LoggingData",
    "NoOpLogger",
    "TerminalLogger",
    "TimeFilter",
    "WallTime",
    "WandbLogger",
    "WandbRun",
]
