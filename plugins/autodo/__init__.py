"""autodo: TODO files and code comments as work items, the second domain on the work core.

Framework-free: `scanner` reads files, `identity` matches what it read to stored items, `planning`
picks, orders and checks dependencies; the statements are in `plugins/autodo/autodo_store.py`, the commands in
`commands/`, the plugin (subject kind, scope use case) in `plugin.py`.
"""
