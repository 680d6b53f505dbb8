"""Files and directories the project makes on the local disk: private where they hold data, and never
in place of something that is not a regular file.

The data directory holds the postings, their outputs and the database: it is created 0700 and the
database file 0600, so other users of the machine read none of it. A directory that already exists
is the user's: it is left as it is (`pipeline migrate` warns when others can read it).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600


def make_private_dirs(path: Path) -> None:
    """Create `path` and its missing parents, each new one readable by its owner alone; existing ones
    are left as they are."""
    missing = []
    for directory in (path, *path.parents):
        if directory.exists():
            break
        missing.append(directory)
    for directory in reversed(missing):
        try:
            directory.mkdir(mode=PRIVATE_DIR_MODE)
        except FileExistsError:  # made meanwhile by another process
            continue
        os.chmod(directory, PRIVATE_DIR_MODE)  # mkdir's mode is masked by the umask; 0700 is the aim


def create_private_file(path: Path) -> None:
    """Create `path` empty, readable by its owner alone, unless it exists (then it is left as it is)."""
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, PRIVATE_FILE_MODE))
    except FileExistsError:
        return


def readable_by_others(path: Path) -> bool:
    """Whether users other than the owner may list or read `path` (group or other permission bits)."""
    try:
        return bool(path.stat().st_mode & (stat.S_IRWXG | stat.S_IRWXO))
    except OSError:
        return False


def not_a_regular_file(path: Path) -> str | None:
    """What `path` (followed if a symlink) is when it exists and is not a regular file ("a character
    device", "a FIFO", ...); None when it is a regular file or does not exist."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return None
    except OSError:
        return None  # the write itself says what is wrong
    if stat.S_ISREG(mode):
        return None
    for test, kind in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return kind
    return "not a regular file"
