"""A domain plugin's source asset (e.g. `autodo`): registers every stored subject of its kind as a
partition, as the `postings` asset does for postings. The subjects themselves come from the plugin's
ingest or scan (`pipeline autodo scan`)."""

from dagster import AssetExecutionContext, AssetsDefinition, MaterializeResult, asset

from appdb import subjects
from assets.partitions import partitions_for
from resources.app_database import AppDatabase


def build_subject_asset(kind: str, description: str) -> AssetsDefinition:
    @asset(name=kind, group_name="ingest", description=description)
    def _subjects(context: AssetExecutionContext, app_db: AppDatabase) -> MaterializeResult:
        with app_db.session() as session:
            keys = subjects.subject_keys(session, kind)
        partitions = partitions_for(kind)
        known = set(context.instance.get_dynamic_partitions(partitions.name))
        new = [key for key in keys if key not in known]
        if new:
            context.instance.add_dynamic_partitions(partitions.name, new)
        return MaterializeResult(metadata={f"total_{kind}": len(keys), "new_partitions": len(new)})

    return _subjects
