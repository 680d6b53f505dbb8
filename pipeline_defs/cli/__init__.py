"""`pipeline`: the command line beside the Dagster UI, one small module per group of commands."""
