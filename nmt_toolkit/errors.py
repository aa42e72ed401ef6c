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


def check_format_version(version, newest: int, where: str, what: str) -> None:
    """A file's format ``version`` must be one this program writes (1 to ``newest``): a non-integer or lower
    value means a damaged or edited file, a higher one a newer nmt_toolkit; each is one line naming ``where``."""
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise DataError(f"{where}: {what} version {version!r} is not one this program writes (1 to {newest}): "
                        f"a damaged or edited file")
    if version > newest:
        raise DataError(f"{where}: {what} version {version} is newer than this nmt_toolkit reads ({newest}); "
                        f"upgrade nmt_toolkit to load it")
