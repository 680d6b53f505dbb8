"""The framework-free domain: the use-case language, the shipped use cases, the quality logic and
the skill models. Nothing here imports Dagster; `appdb` is the only project package below it."""
