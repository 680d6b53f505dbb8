"""`pipeline run` rides out an application database that goes away for a while, as the daemon does.

A database restarted, a failover, a dropped connection: 2 s of refused connections used to end
`pipeline run` with rc 1 and a 100-line traceback, its claims and "alive" heartbeat left for the next
run to reap. Now an error that says the connection failed (`is_connection_error`) is waited out: the
database is asked again with backoff (0.5 s doubling to 5 s) for up to PIPELINE_DATABASE_RETRY_SECONDS,
with one line while it waits and one when it is back; then the work is planned again and goes on (a
run that failed on it gave its claims back, or its heartbeat's end does once the database answers).
Past that time the command stops with one line, rc 1. An error the database gives while reachable
(a missing table, a constraint) is no blip and is not retried.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from sqlalchemy import text
from sqlalchemy.exc import DBAPIError, DisconnectionError, InterfaceError, OperationalError

from resources.app_database import AppDatabase

FIRST_WAIT_SECONDS = 0.5
LONGEST_WAIT_SECONDS = 5.0
# the database answered, and the work failed on a connection error again at once: a few more tries
# (it may have been restarting), then it is not a blip
RETRIES_WHILE_REACHABLE = 3
CONNECTION_ERROR_NAMES = frozenset({"OperationalError", "InterfaceError", "DisconnectionError"})


class DatabaseUnreachable(Exception):
    """The application database stayed away for longer than the command waits."""


def is_connection_error(error: BaseException) -> bool:
    """Whether `error` (or what it was raised from) says the database could not be reached or dropped the
    connection, rather than refused a statement."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, DisconnectionError | InterfaceError | OperationalError):
            return True
        if isinstance(seen, DBAPIError) and seen.connection_invalidated:
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def is_connection_error_name(class_names: list[str]) -> bool:
    """The same for an error known only by its class names (a failed Dagster step's, outermost first)."""
    return any(name in CONNECTION_ERROR_NAMES for name in class_names)


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return (lines[0] if lines else type(error).__name__)[:200]


@dataclass
class DatabaseBlips:
    """How long `pipeline run` waits for the application database, and the waits so far."""

    app_db: AppDatabase
    budget_seconds: float
    say: Callable[[str], None] = field(default=lambda line: print(line, file=sys.stderr, flush=True))
    waits: int = 0
    _retries_while_reachable: int = 0

    def wait_out(self, error: BaseException) -> None:
        """`error` ended a piece of work: if it is a connection error, wait until the database answers (one
        line while waiting), else re-raise it. Raises `DatabaseUnreachable` past the budget."""
        if not is_connection_error(error) or self.budget_seconds <= 0:
            raise error
        self.wait_for_database(_first_line(error))

    def wait_for_database(self, why: str) -> None:
        """Ask the database with backoff until it answers; raise `DatabaseUnreachable` past the budget.
        An immediate answer counts as a retry while reachable: a few in a row, and the error is real."""
        started = time.monotonic()
        if self._answers():
            self._retries_while_reachable += 1
            if self._retries_while_reachable > RETRIES_WHILE_REACHABLE:
                raise DatabaseUnreachable(
                    f"the application database answers, but the work failed on its connection "
                    f"{self._retries_while_reachable} times in a row: {why}"
                )
            self.say(f"pipeline run: the application database dropped the connection ({why}); going on")
            return
        self.waits += 1
        self.say(
            f"pipeline run: the application database is unreachable ({why}); "
            f"retrying for up to {self.budget_seconds:.0f}s"
        )
        pause = FIRST_WAIT_SECONDS
        while True:
            waited = time.monotonic() - started
            if waited >= self.budget_seconds:
                raise DatabaseUnreachable(
                    f"the application database stayed unreachable for {waited:.0f}s "
                    f"(PIPELINE_DATABASE_RETRY_SECONDS={self.budget_seconds:.0f}): {why}"
                )
            time.sleep(min(pause, self.budget_seconds - waited))
            pause = min(pause * 2, LONGEST_WAIT_SECONDS)
            if self._answers():
                self._retries_while_reachable = 0
                back_after = time.monotonic() - started
                self.say(f"pipeline run: the application database is back after {back_after:.0f}s; going on")
                return

    def made_progress(self) -> None:
        """Work went through: the next connection error starts a fresh count."""
        self._retries_while_reachable = 0

    def _answers(self) -> bool:
        try:
            with self.app_db.session() as session:
                session.execute(text("SELECT 1"))
        except Exception:  # noqa: BLE001 - any failure means: not yet
            return False
        return True
