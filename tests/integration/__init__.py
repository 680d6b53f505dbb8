"""Integration tests: the application database on SQLite and PostgreSQL, Dagster in process."""
