"""The migrations build exactly the schema the models declare (an index left out of a
migration would leave every existing database without it)."""

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import text

from appdb.database import get_engine, migrate, session_scope
from appdb.models import Base
from plugins.autodo import autodo_tables
from plugins.postings.store import tables as postings_tables

# The plugins' tables join Base.metadata when their modules are imported: run alone, without these
# imports, the test saw the autodo tables as extra.
PLUGIN_TABLES = (autodo_tables, postings_tables)


def test_migrations_match_the_models(app_db_url: str) -> None:
    migrate(app_db_url)
    with get_engine(app_db_url).connect() as connection:
        differences = compare_metadata(MigrationContext.configure(connection), Base.metadata)
    assert differences == []


def test_threads_of_one_process_migrate_a_new_database_without_error(app_db_url: str) -> None:
    """A code server's sensors open their first sessions side by side at start-up; each upgrade in
    turn (Alembic's running context is a module global: two at once made one of them raise)."""
    import threading

    barrier = threading.Barrier(6)
    errors: list[BaseException] = []

    def first_session() -> None:
        barrier.wait()
        try:
            with session_scope(app_db_url) as session:
                session.execute(text("SELECT 1"))
        except BaseException as exc:  # noqa: BLE001 - collected for the assertion
            errors.append(exc)

    threads = [threading.Thread(target=first_session) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
