"""A third domain, small on purpose: proverbs as subjects. It lives in this one folder and reaches the
project only through the plugin registry (`pipeline_defs/registry.py`: one line, which the test adds),
as docs/writing-a-domain-plugin.md walks through: a kind, a use case, a setting, a command and a table
of its own with its own migration."""
