"""Offline training and evaluation: rebuild the shipped models from the shared data sets.

Not shipped in the package; run from a clone: `python -m training.train_context_tagger` (needs the
`train` extra, torch), `python -m training.train_skill_tagger`, `python -m training.train_skill_linker`."""
