"""Dagster resources: the application database, the LLM backends, the taxonomy and the gym settings."""
