"""The quality loop's logic (the gym): output checks, the judge's rubric, gold scoring, review verdicts."""
