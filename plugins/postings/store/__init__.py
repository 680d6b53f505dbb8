"""The postings' tables and statements: postings, the skills taxonomy, resolved concepts, ingest."""
