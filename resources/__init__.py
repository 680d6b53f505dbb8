"""Dagster resources: the application database and the LLM backends."""

from resources.app_database import AppDatabase
from resources.embedded_backend import EmbeddedLLMResource
from resources.llm import BackendUnavailable, Generation, ItemError, LLMResource
from resources.ollama_backend import OllamaResource

__all__ = [
    "AppDatabase",
    "BackendUnavailable",
    "EmbeddedLLMResource",
    "Generation",
    "ItemError",
    "LLMResource",
    "OllamaResource",
]
