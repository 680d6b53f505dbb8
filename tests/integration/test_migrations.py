"""The migrations build exactly the schema the models declare (an index left out of a
migration would leave every existing database without it)."""

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from appdb.database import get_engine, migrate
from appdb.models import Base


def test_migrations_match_the_models(app_db_url: str) -> None:
    migrate(app_db_url)
    with get_engine(app_db_url).connect() as connection:
        differences = compare_metadata(MigrationContext.configure(connection), Base.metadata)
    assert differences == []
