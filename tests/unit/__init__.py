"""Unit tests: no database, no Dagster instance."""
