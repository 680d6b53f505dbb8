"""The postings' commands, as the generic CLI mounts them (names and help only: nothing heavy is imported).
Their modules: `ingest_command` (load postings), `demo_command` (the demo), `export_command` (the
enriched postings as one file, docs/outputs.md)."""

from domain.core.commands import PluginCommand

COMMANDS = (
    PluginCommand(
        "ingest", "load postings from JSONL or CSV files", "plugins.postings.commands.ingest_command"
    ),
    PluginCommand(
        "demo",
        "ingest the demo postings and summarize them with the embedded model",
        "plugins.postings.commands.demo_command",
    ),
    PluginCommand(
        "export",
        "write the enriched postings (summary, skills, concepts) to Parquet, CSV or JSONL",
        "plugins.postings.commands.export_command",
    ),
)
