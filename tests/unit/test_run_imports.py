"""Every run is a process that imports the code location (its definitions): pandas and pyarrow, which
only the output assets' runs and the readers use, are not imported by it (~0.5 CPU s a process, five
to eight processes per 1,000 postings on the daemon path; docs/results-log.md)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

PROBE = """
import sys
import pipeline_defs.definitions
print(sorted({"pandas", "pyarrow"} & {name.split(".")[0] for name in sys.modules}))
"""


def test_the_code_location_loads_without_pandas_or_pyarrow(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "PIPELINE_DATA_DIR": str(tmp_path / "data"),
        "PIPELINE_DATABASE_URL": f"sqlite:///{tmp_path / 'app.db'}",
        "DAGSTER_HOME": str(tmp_path / "dagster_home"),
    }
    done = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
