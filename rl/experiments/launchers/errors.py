"""Errors a launcher reports to the user as a message rather than a traceback."""


class LauncherError(RuntimeError):
    """The run could not start or finish (unreachable cluster, failed learner...)."""
