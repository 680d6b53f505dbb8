"""The `postings` asset: ingests files (optional) and registers every posting as a partition; and the
materialization `pipeline ingest` reports for it, so Dagster knows the postings were loaded outside it
(a backfill then opens without "upstream not materialized: postings")."""

from pathlib import Path

from dagster import (
    AssetExecutionContext,
    AssetMaterialization,
    Config,
    DagsterInstance,
    DataVersion,
    MaterializeResult,
    MetadataValue,
    asset,
)
from dagster._core.definitions.data_version import (
    DATA_VERSION_IS_USER_PROVIDED_TAG,
    DATA_VERSION_TAG,
    NULL_DATA_VERSION,
)

from assets.partitions import partitions_for
from plugins.postings.store.ingest import IngestReport, ingest_files
from plugins.postings.store.postings_kind import POSTINGS
from resources.app_database import AppDatabase


class PostingsConfig(Config):
    """paths: JSONL or CSV files to ingest first (the `pipeline ingest` command does the same)."""

    paths: list[str] = []


@asset(group_name="ingest")
def postings(
    context: AssetExecutionContext, config: PostingsConfig, app_db: AppDatabase
) -> MaterializeResult:
    """Job postings in the application database, upserted by key."""
    metadata: dict = {}
    if config.paths:
        with app_db.session() as session:
            report = ingest_files(
                session,
                [Path(path) for path in config.paths],
                on_rejection=lambda rejection: context.log.warning(f"rejected {rejection}"),
            )
        metadata.update(
            inserted=len(report.inserted),
            updated=len(report.updated),
            unchanged=len(report.unchanged),
            rejected=report.rejected_count,
            rejections=MetadataValue.md("\n".join(f"- `{r}`" for r in report.rejected[:50]) or "none"),
        )
    with app_db.session() as session:
        keys = POSTINGS.table.keys(session)
        latest = POSTINGS.table.latest_update(session)
    partitions = partitions_for(POSTINGS.name).name
    known = set(context.instance.get_dynamic_partitions(partitions))
    new = [key for key in keys if key not in known]
    if new:
        context.instance.add_dynamic_partitions(partitions, new)
    metadata.update(total_postings=len(keys), new_partitions=len(new), last_update=str(latest))
    return MaterializeResult(metadata=metadata, data_version=DataVersion(POSTINGS_DATA_VERSION))


# Each posting's content is versioned where it is read: every output records its input hash. The postings
# as a whole carry no version, so a load leaves every partition made before as fresh as it was (with a
# version per load, Dagster would call every partition of every use case stale after each ingest).
POSTINGS_DATA_VERSION = NULL_DATA_VERSION.value


def report_ingest(instance: DagsterInstance, report: IngestReport, total: int, source: str) -> None:
    """Record a load of postings done outside Dagster (`pipeline ingest`, the demo) as a materialization
    of `postings`, written to Dagster's storage directly: no daemon or webserver needs to run."""
    instance.report_runless_asset_event(
        AssetMaterialization(
            asset_key="postings",
            description=f"loaded by {source}",
            tags={DATA_VERSION_TAG: POSTINGS_DATA_VERSION, DATA_VERSION_IS_USER_PROVIDED_TAG: "true"},
            metadata={
                "inserted": len(report.inserted),
                "updated": len(report.updated),
                "unchanged": len(report.unchanged),
                "rejected": report.rejected_count,
                "total_postings": total,
                "source": source,
            },
        )
    )
