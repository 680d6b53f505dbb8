"""The shipped use cases, one module each with its prompt, schemas, checks and review hooks."""
