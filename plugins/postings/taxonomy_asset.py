"""The `skills_taxonomy` asset: loads the configured skills CSV into the application database."""

from dagster import AssetExecutionContext, DataVersion, MaterializeResult, MetadataValue, asset
from sqlalchemy.exc import IntegrityError

from plugins.postings.store.taxonomy import load_taxonomy
from plugins.postings.taxonomy_resource import TaxonomyResource
from resources.app_database import AppDatabase

SHOWN_REJECTIONS = 50


@asset(group_name="taxonomy", kinds={"python"})
def skills_taxonomy(
    context: AssetExecutionContext, taxonomy: TaxonomyResource, app_db: AppDatabase
) -> MaterializeResult:
    """Skills taxonomy concepts and labels; rewritten only when the file's content changed."""
    path = taxonomy.taxonomy_path()
    try:
        with app_db.session() as session:
            load = load_taxonomy(session, path)
    except IntegrityError:
        # Two first runs at once both found no taxonomy and both loaded it; the later one's
        # transaction is rolled back whole. Looking again finds the other's rows (or loads anew).
        context.log.info("another run loaded the taxonomy at the same moment: looking again")
        with app_db.session() as session:
            load = load_taxonomy(session, path)
    for rejection in load.rejected:
        context.log.warning(f"rejected {rejection}")
    context.log.info(
        f"{'loaded' if load.changed else 'unchanged'}: {load.concepts} concepts, {load.labels} labels "
        f"from {path}"
    )
    shown = load.rejected[:SHOWN_REJECTIONS]
    # The content hash as data version: reloading the same content leaves downstream assets current.
    return MaterializeResult(
        data_version=DataVersion(load.content_hash),
        metadata={
            "path": str(path),
            "concepts": load.concepts,
            "labels": load.labels,
            "content_hash": load.content_hash,
            "changed": load.changed,
            "rejected": len(load.rejected),
            "rejections": MetadataValue.md("\n".join(f"- `{r}`" for r in shown) or "none"),
        },
    )
