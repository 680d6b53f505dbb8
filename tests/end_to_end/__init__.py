"""End-to-end tests: the real `dagster dev`, the browser, the embedded model, a live Ollama."""
