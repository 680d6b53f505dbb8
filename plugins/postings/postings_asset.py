"""The `postings` asset: ingests files (optional) and registers every posting as a partition."""

from pathlib import Path

from dagster import AssetExecutionContext, Config, MaterializeResult, MetadataValue, asset

from assets.partitions import partitions_for
from plugins.postings.store.ingest import ingest_files
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
            report = ingest_files(session, [Path(path) for path in config.paths])
        for rejection in report.rejected:
            context.log.warning(f"rejected {rejection}")
        metadata.update(
            inserted=len(report.inserted),
            updated=len(report.updated),
            unchanged=len(report.unchanged),
            rejected=len(report.rejected),
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
    return MaterializeResult(metadata=metadata)
