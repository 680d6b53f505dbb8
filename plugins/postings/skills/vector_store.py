"""Sentence vectors kept on disk between the processes of one machine, so a posting is encoded once.

posting_skills encodes a posting's sentences (the context tagger reads them, and carries on the ones
its mentions come from to sentence vectors); skill_entities and the faithfulness check run in other
processes on the daemon path (a run each) and read those vectors here instead of encoding the
sentences again. Keyed by the encoder's version and the text's token ids; bounded (the oldest rows
go first), so it stays a cache: a miss only costs an encoding. One SQLite file (WAL: readers do
not wait for a writer); any error turns it off for the process rather than failing a posting.
"""

from __future__ import annotations

import hashlib
import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

KEPT_ROWS = 200_000  # ~330 MB at 384 float32 each: a day of postings' sentences at our rates
PRUNE_EVERY = 2_000  # rows written between two prunings


class VectorStore:
    """Unit vectors by key (bytes), shared by the processes that open the same file."""

    def __init__(self, path: Path, kept_rows: int = KEPT_ROWS) -> None:
        self.path, self.kept_rows = path, kept_rows
        self._lock = threading.Lock()
        self._written = 0
        self._connection: sqlite3.Connection | None = None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            connection = sqlite3.connect(path, timeout=5.0, check_same_thread=False, isolation_level=None)
            connection.execute("PRAGMA journal_mode=WAL")
            connection.execute("PRAGMA synchronous=OFF")  # a cache: a lost row is encoded again
            connection.execute(
                "CREATE TABLE IF NOT EXISTS vectors (key BLOB PRIMARY KEY, vector BLOB NOT NULL)"
            )
            self._connection = connection
        except (OSError, sqlite3.Error):
            self._connection = None

    @staticmethod
    def key(version: str, ids: bytes) -> bytes:
        return hashlib.blake2b(version.encode() + b"\0" + ids, digest_size=16).digest()

    def get_many(self, keys: Sequence[bytes]) -> dict[bytes, np.ndarray]:
        """The vectors kept under any of `keys`."""
        if self._connection is None or not keys:
            return {}
        found: dict[bytes, np.ndarray] = {}
        try:
            with self._lock:
                for start in range(0, len(keys), 500):
                    part = list(keys[start : start + 500])
                    marks = ",".join("?" * len(part))
                    rows = self._connection.execute(
                        f"SELECT key, vector FROM vectors WHERE key IN ({marks})", part
                    ).fetchall()
                    found.update((bytes(key), np.frombuffer(vector, np.float32)) for key, vector in rows)
        except sqlite3.Error:
            self._connection = None
        return found

    def put_many(self, items: dict[bytes, np.ndarray]) -> None:
        if self._connection is None or not items:
            return
        rows = [(key, np.ascontiguousarray(vector, np.float32).tobytes()) for key, vector in items.items()]
        try:
            with self._lock:
                self._connection.execute("BEGIN")
                self._connection.executemany(
                    "INSERT OR REPLACE INTO vectors (key, vector) VALUES (?, ?)", rows
                )
                self._connection.execute("COMMIT")
                self._written += len(rows)
                if self._written >= PRUNE_EVERY:
                    self._written = 0
                    self._connection.execute(
                        "DELETE FROM vectors WHERE rowid <= (SELECT max(rowid) FROM vectors) - ?",
                        (self.kept_rows,),
                    )
        except sqlite3.Error:
            self._connection = None
