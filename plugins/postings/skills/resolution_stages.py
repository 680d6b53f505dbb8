"""The stages a mention's resolution can end in, best first: a constant of its own so the use cases'
output schema names them without importing the resolver (numpy, the embedding clients)."""

STAGES = ("exact", "alt_label", "fuzzy", "semantic", "learned", "unmatched")
