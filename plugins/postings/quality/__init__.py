"""The postings' own quality logic: a summary's faithfulness, the checks of summaries and skills, the
deterministic judge of summaries and its calibration set."""
