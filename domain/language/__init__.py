"""The use-case language: what a use case, a chain of steps and an LLM call's outcome are."""
