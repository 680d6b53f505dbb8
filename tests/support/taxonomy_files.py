"""Small skills-taxonomy CSV files in ESCO's format, written for a test."""

from __future__ import annotations

import csv
from pathlib import Path

URI = "https://posting-enrichment.example/skill/"


HEADER = ["conceptUri", "preferredLabel", "altLabels", "skillType", "description"]


def write_taxonomy(path: Path, rows: list[list[str]], header: list[str] = HEADER, bom: bool = False) -> Path:
    with path.open("w", newline="", encoding="utf-8-sig" if bom else "utf-8") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(header)
        writer.writerows(rows)
    return path
