"""An IO manager that keeps asset values as Parquet files, so any asset (a user's own too) reads them as
pandas DataFrames: `defs.load_asset_value(...)` or an `@asset` parameter named after the asset.

An asset returns either a DataFrame or `TableChunks` (an Arrow schema and an iterable of Arrow tables),
which is written chunk by chunk: a table of a million rows never has to be in memory at once. Each
write records the row count, the column schema and the file as the materialization's metadata, and
goes to a temporary file renamed when complete, so a reader never sees half a file.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dagster import (
    ConfigurableIOManager,
    InputContext,
    MetadataValue,
    OutputContext,
    TableColumn,
    TableSchema,
)

if TYPE_CHECKING:  # pandas and pyarrow (~0.5 CPU s to import) only where a table is read or written:
    import pandas as pd  # every run loads this module, few write a table
    import pyarrow as pa


@dataclass(frozen=True)
class TableChunks:
    """A table to write chunk by chunk; `descriptions` are the columns' meanings, shown in the UI."""

    schema: pa.Schema
    chunks: Iterable[pa.Table]
    descriptions: Mapping[str, str] = field(default_factory=dict)


def table_schema(schema: pa.Schema, descriptions: Mapping[str, str] | None = None) -> TableSchema:
    """An Arrow schema as the column schema the UI shows on an asset's page."""
    descriptions = descriptions or {}
    return TableSchema(
        columns=[
            TableColumn(name=item.name, type=str(item.type), description=descriptions.get(item.name))
            for item in schema
        ]
    )


class ParquetIOManager(ConfigurableIOManager):
    """Asset values as `<base_dir>/<asset key path>.parquet`."""

    base_dir: str

    def path_for(self, asset_path: Iterable[str]) -> Path:
        return Path(self.base_dir, *asset_path).with_suffix(".parquet")

    def handle_output(self, context: OutputContext, obj: Any) -> None:
        if obj is None:
            return
        if _is_dataframe(obj):
            import pyarrow as pa

            table = pa.Table.from_pandas(obj, preserve_index=False)
            obj = TableChunks(table.schema, [table])
        if not isinstance(obj, TableChunks):
            raise TypeError(f"ParquetIOManager writes DataFrames or TableChunks, not {type(obj).__name__}")
        path = self.path_for(context.asset_key.path)
        rows = write_parquet(obj, path)
        context.add_output_metadata(
            {
                "dagster/row_count": rows,
                "dagster/column_schema": table_schema(obj.schema, obj.descriptions),
                "path": MetadataValue.path(str(path)),
                "size_bytes": path.stat().st_size,
            }
        )

    def load_input(self, context: InputContext) -> pd.DataFrame:
        path = self.path_for(context.asset_key.path)
        if not path.exists():
            raise FileNotFoundError(
                f"{path}: the asset {context.asset_key.to_user_string()} is not materialized yet"
            )
        import pandas as pd

        return pd.read_parquet(path)


def _is_dataframe(obj: Any) -> bool:
    """A pandas DataFrame, without importing pandas where none can be (every run loads this module)."""
    pandas = sys.modules.get("pandas")
    return pandas is not None and isinstance(obj, pandas.DataFrame)


def write_parquet(table: TableChunks, path: Path) -> int:
    """Write the chunks to `path` (replacing it only once complete); the number of rows written."""
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial")
    rows = 0
    try:
        with pq.ParquetWriter(partial, table.schema, compression="zstd") as writer:
            for chunk in table.chunks:
                writer.write_table(chunk)
                rows += chunk.num_rows
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
    return rows
