"""Skill models: finding skill mentions in a posting and linking them to taxonomy concepts."""
