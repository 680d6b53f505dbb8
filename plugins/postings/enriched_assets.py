"""The enriched postings as assets users build on: `enriched_postings` (a row per posting),
`posting_concepts` (a row per posting and resolved mention) and `skill_demand` (concepts per week).

They sit downstream of the use cases, are written as Parquet by the `parquet_io_manager`
(resources/parquet_io_manager.py) and so read as DataFrames by `defs.load_asset_value` or a user's own
`@asset(ins=...)`. The `outputs_sensor` remakes them, all three in one run, when an output changed
(no waiting for every posting to have every output: a posting without one has nulls), but while runs
are still making outputs at most every `PIPELINE_OUTPUTS_REFRESH_SECONDS`: each remake reads every
posting, and one a minute while a backlog drained was 5-6% of the pipeline's CPU at 10,000
postings. The tables are documented in docs/outputs.md.
"""

import json
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from dagster import (
    AssetExecutionContext,
    AssetKey,
    AssetsDefinition,
    AssetSelection,
    DefaultSensorStatus,
    MetadataValue,
    RunRequest,
    RunsFilter,
    SensorDefinition,
    SensorEvaluationContext,
    SkipReason,
    asset,
    sensor,
)
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from appdb import discovery
from appdb.models import UseCaseOutput
from assets.run_tags import WORK_GROUP_TAG
from plugins.postings.store.enriched_columns import OUTPUT_PREFIXES, SCHEMA_VERSION
from plugins.postings.store.postings_kind import POSTINGS_TABLE
from resources.app_database import AppDatabase
from resources.parquet_io_manager import ParquetIOManager, TableChunks
from sensors.discovery_sensor import ACTIVE_STATUSES

if TYPE_CHECKING:  # pyarrow (and the Arrow schemas) in the output assets' runs only, not in every run
    import pyarrow as pa
    import pyarrow.parquet as pq

PARQUET_IO_MANAGER = "parquet_io_manager"
OUTPUTS_GROUP = "outputs"
READ_CHUNK = 5_000

OUTPUTS_RUN_TAG = "pipeline/outputs"  # on the outputs sensor's runs
OUTPUTS_SENSOR_INTERVAL_SECONDS = 30


def outputs_marker(session: Session) -> str:
    """A fingerprint of what the tables are made of: the postings and the outputs they show."""
    made = session.execute(
        select(func.count(), func.max(UseCaseOutput.updated_at)).where(
            UseCaseOutput.use_case.in_(OUTPUT_PREFIXES)
        )
    ).one()
    return f"{discovery.subjects_marker(session, POSTINGS_TABLE)}|{made[0]}|{made[1]}"


def build_outputs_sensor(refresh_seconds: int) -> SensorDefinition:
    """The sensor that remakes the three tables, in one run, when an output or a posting changed since
    it last asked; while runs of the work groups are going (a backlog draining) at most every
    `refresh_seconds`, and as soon as they have ended."""

    @sensor(
        name="outputs_sensor",
        asset_selection=AssetSelection.groups(OUTPUTS_GROUP),
        minimum_interval_seconds=OUTPUTS_SENSOR_INTERVAL_SECONDS,
        default_status=DefaultSensorStatus.RUNNING,
        description=(
            "Remakes the enriched postings tables when an output changed; while runs are making outputs, "
            f"at most every {refresh_seconds} s (PIPELINE_OUTPUTS_REFRESH_SECONDS) and when they end."
        ),
    )
    def outputs_sensor(context: SensorEvaluationContext, app_db: AppDatabase) -> RunRequest | SkipReason:
        with app_db.session() as session:
            marker = outputs_marker(session)
        previous = json.loads(context.cursor) if context.cursor else {}
        if previous.get("marker") == marker:
            return SkipReason("no output or posting changed since the tables were last asked for")
        active = context.instance.get_runs(RunsFilter(statuses=ACTIVE_STATUSES))
        if any(OUTPUTS_RUN_TAG in run.tags for run in active):
            return SkipReason("the tables are being made; what changed since goes in the next run")
        making = sum(WORK_GROUP_TAG in run.tags for run in active)
        due = previous.get("requested_at", 0.0) + refresh_seconds
        if making and time.time() < due:
            return SkipReason(
                f"{making} runs are making outputs: the tables are remade when they end, or at "
                f"{datetime.fromtimestamp(due, UTC):%H:%M:%S} UTC at the latest"
            )
        context.update_cursor(json.dumps({"marker": marker, "requested_at": time.time()}))
        return RunRequest(tags={OUTPUTS_RUN_TAG: "refresh"})

    return outputs_sensor


def build_output_assets(use_case_names: Sequence[str]) -> list[AssetsDefinition]:
    """The three assets, downstream of those of `use_case_names` whose outputs the table holds."""
    upstream = [AssetKey(name) for name in use_case_names if name in OUTPUT_PREFIXES]

    @asset(
        group_name=OUTPUTS_GROUP,
        deps=[AssetKey("postings"), *upstream],
        io_manager_key=PARQUET_IO_MANAGER,
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
        return _enriched_table(app_db)

    @asset(
        group_name=OUTPUTS_GROUP,
        deps=[enriched_postings],
        io_manager_key=PARQUET_IO_MANAGER,
        required_resource_keys={PARQUET_IO_MANAGER},
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


def _enriched_table(app_db: AppDatabase) -> TableChunks:
    """The table `pipeline export` writes (`enriched_postings.enriched_table`, the one producer), read
    in a session held while the IO manager writes its chunks."""
    from plugins.postings.store.enriched_postings import COLUMN_DESCRIPTIONS, ENRICHED_SCHEMA, enriched_table

    def chunks() -> "Iterator[pa.Table]":
        with app_db.session() as session:
            yield from enriched_table(session, chunk_size=READ_CHUNK).chunks

    return TableChunks(ENRICHED_SCHEMA, chunks(), COLUMN_DESCRIPTIONS)


def _concept_chunks(source: "pq.ParquetFile") -> "Iterator[pa.Table]":
    import pyarrow as pa

    from plugins.postings.store.enriched_postings import concept_rows

    for batch in source.iter_batches(batch_size=READ_CHUNK):
        yield concept_rows(pa.Table.from_batches([batch]))
