"""A kind's source asset (e.g. `autodo`): registers every stored subject of the kind as a partition.
The subjects themselves come from the plugin's ingest or scan (`pipeline autodo scan`)."""

from dagster import AssetExecutionContext, AssetsDefinition, MaterializeResult, asset

from assets.partitions import add_partitions, partitions_for
from domain.language.subject_kinds import SubjectKind
from resources.app_database import AppDatabase


def build_subject_asset(kind: SubjectKind, description: str) -> AssetsDefinition:
    @asset(name=kind.name, group_name="ingest", description=description)
    def _subjects(context: AssetExecutionContext, app_db: AppDatabase) -> MaterializeResult:
        with app_db.session() as session:
            keys = kind.table.keys(session)
        partitions = partitions_for(kind.name)
        known = set(context.instance.get_dynamic_partitions(partitions.name))
        new = [key for key in keys if key not in known]
        add_partitions(context.instance, partitions.name, new)
        return MaterializeResult(metadata={f"total_{kind.name}": len(keys), "new_partitions": len(new)})

    return _subjects
