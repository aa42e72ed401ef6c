"""Errors meant for people, not for tracebacks.

Every program catches :class:`NmtError` at its edge, prints ``prog: error: <message>`` on one line and
exits with :attr:`NmtError.exit_code`: 2 for usage mistakes (a wrong option, an unknown name), 1 for data
problems (a missing or corrupt file). Anything else is a bug and keeps its traceback.
"""


class NmtError(Exception):
    """A user-facing failure: the message names the file or option and says what is wrong."""

    exit_code = 1


class DataError(NmtError):
    """Bad input data: missing, truncated, malformed, inconsistent files."""

    exit_code = 1


class UsageError(NmtError):
    """Bad options: unknown names, conflicting flags, invalid values."""

    exit_code = 2
