"""What a command writes to a terminal: safe one-line text, tables, JSON, exit codes (`terminal`), the
progress lines of long commands (`progress`) and checked whole-number arguments (`arguments`). Below the
plugins, so a plugin's own commands print as the generic CLI does; it imports no Dagster."""
