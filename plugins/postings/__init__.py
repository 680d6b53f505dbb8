"""Job postings: the first plugin. Summaries, skills and their taxonomy concepts for each posting."""
