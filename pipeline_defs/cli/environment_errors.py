"""One line instead of a traceback when a command cannot use what the settings point at.

An application database that cannot be opened (a server down, a wrong port, a SQLite file that cannot be
made), a data directory that cannot be made or written, a database connection lost mid-command: these
are the machine's problems, not the command's, and the user needs the one line that names the place and
the setting to change, not 40 to 130 lines of two stack traces. Any other exception still raises with
its traceback (a bug keeps it).

An unsupported database URL (`mysql://`) never gets this far: the settings refuse it
(`pipeline_defs/settings.py`), as they refuse every value that cannot be used.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pipeline_defs.settings import Settings

DATABASE_VARIABLE = "PIPELINE_DATABASE_URL"
DATA_DIR_VARIABLE = "PIPELINE_DATA_DIR"


def environment_error(error: BaseException, settings: Settings) -> str | None:
    """The one line for `error` (or an error it was raised from), or None when it is not one of these."""
    from appdb.database import DatabaseUnavailable  # loaded with the settings already: costs nothing

    for cause in _chain(error):
        if isinstance(cause, DatabaseUnavailable):
            return f"{cause} ({_database_setting(settings)})"
        if isinstance(cause, OSError) and not isinstance(cause, BrokenPipeError):
            folder = _setting_holding(cause, settings)
            if folder is not None:
                variable, path = folder
                return f"cannot use the directory {path} ({variable}): {_os_reason(cause)}"
        if _lost_connection(cause):
            return f"the database failed: {_first_line(getattr(cause, 'orig', None) or cause)}"
    return None


def _database_setting(settings: Settings) -> str:
    """Where the database's URL came from: its variable (or the config file's key), or the default
    inside the data directory."""
    origin = settings.origin("database_url")
    if origin == "default":
        return f"the default app.db in {DATA_DIR_VARIABLE}"
    return origin.removeprefix("environment ")


def _chain(error: BaseException) -> Iterator[BaseException]:
    """The error, then what it was raised from or while handling (Dagster wraps what a run raised)."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _setting_holding(error: OSError, settings: Settings) -> tuple[str, Path] | None:
    """The setting whose directory the failed path is in, or on the way to (making a missing one)."""
    failed = [Path(name) for name in (error.filename, error.filename2) if isinstance(name, str) and name]
    for variable, folder in ((DATA_DIR_VARIABLE, settings.data_dir), ("DAGSTER_HOME", settings.dagster_home)):
        if any(path.is_relative_to(folder) or folder.is_relative_to(path) for path in failed):
            return variable, folder
    return None


def _os_reason(error: OSError) -> str:
    reason = error.strerror or str(error)
    return f"{reason}: {error.filename}" if error.filename else reason


def _lost_connection(error: BaseException) -> bool:
    """A database connection that failed or went away mid-command (SQLAlchemy is loaded by then)."""
    exc = sys.modules.get("sqlalchemy.exc")
    if exc is None:
        return False
    return isinstance(error, exc.OperationalError | exc.InterfaceError | exc.DisconnectionError)


def _first_line(error: BaseException) -> str:
    return next((line.strip() for line in str(error).splitlines() if line.strip()), type(error).__name__)
