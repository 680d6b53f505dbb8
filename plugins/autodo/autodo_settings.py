"""The autodo plugin's section of the configuration (read by `pipeline_defs/settings.py`, the one reader;
declared here, beside the plugin). In a config file these are the keys of the `[autodo]` table."""

from __future__ import annotations

from dataclasses import dataclass

from domain.core.configuration import on_off, positive_int, setting

DEFAULT_SCAN_MAX_FILE_BYTES = 1_000_000


@dataclass(frozen=True)
class AutodoSettings:
    scan_max_file_bytes: int = setting(
        "PIPELINE_AUTODO_MAX_FILE_BYTES",
        "the largest file `pipeline autodo scan` reads; a larger one is reported and skipped",
        DEFAULT_SCAN_MAX_FILE_BYTES,
        parse=positive_int,
    )
    scan_follow_symlinks: bool = setting(
        "PIPELINE_AUTODO_FOLLOW_SYMLINKS",
        "`on`: `pipeline autodo scan` follows a symlink to a file outside the scanned directory (as "
        "`--follow-symlinks` does); off, such a link is reported and skipped",
        False,
        parse=on_off,
    )
