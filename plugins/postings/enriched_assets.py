"""The enriched postings as assets users build on: `enriched_postings` (a row per posting),
`posting_concepts` (a row per posting and resolved mention) and `skill_demand` (concepts per week).

They sit downstream of the use cases, are written as Parquet by the `parquet_io_manager`
(resources/parquet_io_manager.py) and so read as DataFrames by `defs.load_asset_value` or a user's own
`@asset(ins=...)`. Declarative automation materializes them when an upstream output changes (no
waiting for every posting to have every output: a posting without one has nulls). The tables are
documented in docs/outputs.md.
"""

from collections.abc import Iterator, Sequence
from datetime import UTC
from typing import TYPE_CHECKING, Any

from dagster import (
    AssetExecutionContext,
    AssetKey,
    AssetsDefinition,
    AssetSelection,
    AutomationCondition,
    AutomationConditionSensorDefinition,
    DefaultSensorStatus,
    MetadataValue,
    asset,
)
from sqlalchemy import func, select

from appdb.models import UseCaseOutput
from plugins.postings.store.enriched_columns import OUTPUT_PREFIXES, SCHEMA_VERSION
from resources.app_database import AppDatabase
from resources.parquet_io_manager import ParquetIOManager, TableChunks

if TYPE_CHECKING:  # pyarrow (and the Arrow schemas) in the output assets' runs only, not in every run
    import pyarrow as pa
    import pyarrow.parquet as pq

PARQUET_IO_MANAGER = "parquet_io_manager"
OUTPUTS_GROUP = "outputs"
READ_CHUNK = 5_000

# Like `eager()`, less "every dependency partition exists": the table is remade when any posting's
# output changes, not only once every posting has every output.
WHEN_OUTPUTS_CHANGE = (
    (AutomationCondition.missing() | AutomationCondition.any_deps_updated()).since_last_handled()
    & ~AutomationCondition.any_deps_in_progress()
    & ~AutomationCondition.in_progress()
).with_label("when an upstream output changes")


# Dagster's own default automation sensor starts stopped: this one runs as soon as the daemon does.
OUTPUTS_AUTOMATION_SENSOR = AutomationConditionSensorDefinition(
    "outputs_automation_sensor",
    target=AssetSelection.groups(OUTPUTS_GROUP),
    default_status=DefaultSensorStatus.RUNNING,
    minimum_interval_seconds=30,
    description="Materializes the enriched postings tables when an upstream output changes.",
)


def build_output_assets(use_case_names: Sequence[str]) -> list[AssetsDefinition]:
    """The three assets, downstream of those of `use_case_names` whose outputs the table holds."""
    upstream = [AssetKey(name) for name in use_case_names if name in OUTPUT_PREFIXES]

    @asset(
        group_name=OUTPUTS_GROUP,
        deps=[AssetKey("postings"), *upstream],
        io_manager_key=PARQUET_IO_MANAGER,
        automation_condition=WHEN_OUTPUTS_CHANGE,
        kinds={"parquet", "pandas"},
        metadata={"schema_version": SCHEMA_VERSION, "docs": "docs/outputs.md"},
    )
    def enriched_postings(context: AssetExecutionContext, app_db: AppDatabase) -> TableChunks:
        """Every posting with its summary, skills (with spans) and taxonomy concepts, and each output's
        version, model and time; nulls where a posting has no output yet (docs/outputs.md)."""
        with app_db.session() as session:
            latest = session.scalar(
                select(func.max(UseCaseOutput.updated_at)).where(UseCaseOutput.use_case.in_(OUTPUT_PREFIXES))
            )
        if latest is not None:
            context.add_output_metadata(
                {"latest_output_at": MetadataValue.timestamp(latest.replace(tzinfo=UTC))}
            )
        from plugins.postings.store.enriched_postings import COLUMN_DESCRIPTIONS, ENRICHED_SCHEMA

        return TableChunks(ENRICHED_SCHEMA, _enriched_chunks(app_db), COLUMN_DESCRIPTIONS)

    @asset(
        group_name=OUTPUTS_GROUP,
        deps=[enriched_postings],
        io_manager_key=PARQUET_IO_MANAGER,
        required_resource_keys={PARQUET_IO_MANAGER},
        automation_condition=AutomationCondition.eager(),
        kinds={"parquet", "pandas"},
        metadata={"schema_version": SCHEMA_VERSION, "docs": "docs/outputs.md"},
    )
    def posting_concepts(context: AssetExecutionContext) -> TableChunks:
        """One row per (posting, resolved skill mention): `enriched_postings.concepts`, long, read from
        its Parquet file chunk by chunk."""
        import pyarrow.parquet as pq

        from plugins.postings.store.enriched_postings import COLUMN_DESCRIPTIONS, CONCEPTS_SCHEMA

        manager: ParquetIOManager = getattr(context.resources, PARQUET_IO_MANAGER)
        source = pq.ParquetFile(manager.path_for(["enriched_postings"]))
        return TableChunks(CONCEPTS_SCHEMA, _concept_chunks(source), COLUMN_DESCRIPTIONS)

    @asset(
        group_name=OUTPUTS_GROUP,
        io_manager_key=PARQUET_IO_MANAGER,
        automation_condition=AutomationCondition.eager(),
        kinds={"pandas"},
    )
    # DataFrames in and out (the Parquet IO manager's); not annotated so, or every run would import pandas
    def skill_demand(context: AssetExecutionContext, posting_concepts: Any) -> Any:
        """How many postings ask for each concept, per week (of posted_at; of the resolution when a
        posting has no date): what an analyst builds on `posting_concepts`."""
        demand = weekly_concept_demand(posting_concepts)
        overall = demand.groupby(["concept_uri", "concept_label"], as_index=False)["postings"].sum()
        top = overall.sort_values(["postings", "concept_label"], ascending=[False, True]).head(10)
        context.add_output_metadata(
            {
                "weeks": int(demand["week"].nunique()),
                "distinct_concepts": len(overall),
                "top_concept_postings": int(top["postings"].iloc[0]) if len(top) else 0,
                "top_concepts": MetadataValue.md(
                    "| concept | postings |\n|---|---|\n"
                    + "".join(f"| {row.concept_label} | {row.postings} |\n" for row in top.itertuples())
                ),
            }
        )
        return demand

    return [enriched_postings, posting_concepts, skill_demand]


def weekly_concept_demand(concepts: Any) -> Any:
    """Postings per (week, concept), unmatched mentions left out; a week is its Monday (UTC)."""
    matched = concepts[concepts["concept_uri"].notna()].copy()
    when = matched["posted_at"].fillna(matched["concepts_updated_at"])
    matched["week"] = when.dt.tz_convert(None).dt.to_period("W-SUN").dt.start_time.dt.date
    return (
        matched.groupby(["week", "concept_uri", "concept_label"], as_index=False)["key"]
        .nunique()
        .rename(columns={"key": "postings"})
        .sort_values(["week", "postings", "concept_label"], ascending=[True, False, True], ignore_index=True)
    )


def _enriched_chunks(app_db: AppDatabase) -> "Iterator[pa.Table]":
    from plugins.postings.store.enriched_postings import iter_enriched_tables

    with app_db.session() as session:
        yield from iter_enriched_tables(session, chunk_size=READ_CHUNK)


def _concept_chunks(source: "pq.ParquetFile") -> "Iterator[pa.Table]":
    import pyarrow as pa

    from plugins.postings.store.enriched_postings import concept_rows

    for batch in source.iter_batches(batch_size=READ_CHUNK):
        yield concept_rows(pa.Table.from_batches([batch]))
