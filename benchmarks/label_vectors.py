"""The first build of a taxonomy's label vectors (MiniLM in process): CPU seconds and wall time.

What `skill_entities` pays the first time it resolves against a new taxonomy version (ESCO: ~98,000
distinct labels): the taxonomy is loaded into a scratch SQLite database, the resolver built over it,
and its labels embedded into an empty cache directory; then the nearest-neighbour index is built over
them. CPU is this process's (every thread, OpenBLAS's included: `RUSAGE_SELF`).

    python -m benchmarks.label_vectors --taxonomy ../shared/data/esco/skills_en_v1.1.1.csv
    python -m benchmarks.label_vectors --taxonomy ... --limit 10000    # the first 10,000 labels only
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

from appdb.database import dispose, migrate, session_scope
from pipeline_defs.settings import Settings
from plugins.postings.skills.embeddings import MiniLMEmbeddings
from plugins.postings.skills.skill_resolver import SkillResolver
from plugins.postings.store.taxonomy import load_taxonomy

DEFAULT_TAXONOMY = (
    Path(os.environ.get("PIPELINE_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))
    / "esco"
    / "skills_en_v1.1.1.csv"
)


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--taxonomy", type=Path, default=DEFAULT_TAXONOMY)
    parser.add_argument("--limit", type=int, default=0, help="embed only the first N labels (0: all)")
    parser.add_argument("--save", type=Path, help="write the vectors here (.npy), to compare two builds")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="label-vectors-") as tmp:
        url = f"sqlite:///{Path(tmp) / 'taxonomy.db'}"
        migrate(url)
        with session_scope(url) as session:
            load_taxonomy(session, args.taxonomy)
        settings = Settings.from_env()
        embeddings = MiniLMEmbeddings(
            cache_dir=settings.cache_dir,
            provider=settings.postings.encoder_provider,
            precision=settings.postings.encoder_precision,
        )
        with session_scope(url) as session:
            resolver = SkillResolver.from_session(
                session, embeddings=embeddings, vector_cache_dir=Path(tmp) / "cache"
            )
        dispose(url)
        if args.limit:
            resolver._label_texts = resolver._label_texts[: args.limit]
        cpu, wall = cpu_seconds(), time.perf_counter()
        vectors = resolver._embed_labels(embeddings)
        embed_cpu, embed_wall = cpu_seconds() - cpu, time.perf_counter() - wall
        index_cpu = index_wall = None
        if not args.limit:
            cpu, wall = cpu_seconds(), time.perf_counter()
            resolver._label_vectors = vectors
            resolver.label_index()
            index_cpu, index_wall = cpu_seconds() - cpu, time.perf_counter() - wall
    if args.save:
        import numpy as np

        np.save(args.save, vectors)
    print(
        json.dumps(
            {
                "labels": len(vectors),
                "embed_cpu_s": round(embed_cpu, 1),
                "embed_wall_s": round(embed_wall, 1),
                "cpu_ms_per_label": round(1000 * embed_cpu / len(vectors), 2),
                "index_cpu_s": None if index_cpu is None else round(index_cpu, 1),
                "index_wall_s": None if index_wall is None else round(index_wall, 1),
                "load_average": os.getloadavg()[0],
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
