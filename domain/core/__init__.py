"""The work core's own language: subjects (what the engine works on) and domain plugins."""
