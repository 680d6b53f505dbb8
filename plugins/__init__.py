"""The domain plugins: what the work engine works on. Each plugin brings its subject kind, its use cases,
its tables and its Dagster part; the entry (`pipeline_defs/definitions.py`) merges them. The engine
(`sensors/`, `assets/`, `resources/`, `domain/`, `appdb/`) imports no plugin, and no plugin another."""
