"""What a reviewer's verdict does: accept, reject or correct one review item.

- accept: the output is right. It joins the corpus as gold as it is; a blocked output
  (rejected by a check, never stored) is delivered as the current output.
- reject: the output is wrong, with no better value given. It counts as a
  disagreement in the gold evaluation until the output is remade.
- correct: the reviewer's value (made by the use case's correction hooks from the options given:
  an edited summary, skills added or removed, another concept for a mention) joins the corpus and
  is delivered as the current output, so downstream use cases redo their part from it. It keeps the
  use case's version, so it stays until the output is remade (a new version or a changed subject);
  the corpus keeps it for every later evaluation.

A correction must still be a valid output: the output schema, the blocking checks, and whatever the
hook itself demands. Every delivered value is recorded in `interactions` (backend `review`), so
`pipeline trace` shows who changed what.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jsonschema
from sqlalchemy.orm import Session

from appdb import interactions, review
from appdb.models import ReviewItem, utcnow
from domain.language.declaration import UseCase, model_label
from domain.language.output_parsing import first_blocking_failure
from domain.quality.corrections import CorrectionContext, CorrectionError, Edits, edit_options, flags

REVIEWER_MODEL = review.REVIEWER


@dataclass(frozen=True)
class Verdict:
    item_id: int
    use_case: str
    subject_key: str
    status: str
    delivered: bool  # the value is now the current output
    correction_id: int | None = None


def _use_case(item: ReviewItem, use_cases: Mapping[str, UseCase]) -> UseCase:
    if item.use_case not in use_cases:
        raise CorrectionError(f"review item {item.id}: use case {item.use_case!r} is no longer declared")
    return use_cases[item.use_case]


def _subject(session: Session, use_case: UseCase, key: str) -> dict[str, Any]:
    """The subject's fields, as the use case's checks and correction hooks see them."""
    fields = use_case.subject.table.read(session, [key]).get(key)
    if fields is None:
        raise CorrectionError(f"{use_case.subject.noun} {key!r} no longer exists")
    return fields


def _deliverable(session: Session, item: ReviewItem, use_case: UseCase) -> bool:
    """Whether the item's output is still the one the use case delivers (or none was stored)."""
    if item.use_case_version != use_case.version:
        return False
    current = review.current_output(session, item.use_case, item.subject_key)
    return (
        current is None
        or current.interaction_id == item.interaction_id
        or current.backend == review.REVIEW_BACKEND
    )


def _deliver(
    session: Session, item: ReviewItem, use_case: UseCase, value: dict[str, Any], command: str
) -> int:
    """Record the reviewer's value as an interaction and make it the current output; its id."""
    interaction_id = interactions.record_interaction(
        session,
        use_case=use_case.name,
        use_case_version=use_case.version,
        subject_key=item.subject_key,
        backend=review.REVIEW_BACKEND,
        model=REVIEWER_MODEL,
        prompt=command,
        system_prompt="",
        options={"review_item": item.id},
        raw_response=json.dumps(value, ensure_ascii=False),
        parsed_output=value,
        status="ok",
        source="review",
        finished_at=utcnow(),
    )
    review.apply_reviewed_output(
        session,
        use_case=use_case.name,
        subject_key=item.subject_key,
        subjects=use_case.subject.table,
        value=value,
        model=model_label(use_case),
        use_case_version=use_case.version,
        interaction_id=interaction_id,
    )
    if use_case.after_store is not None:
        use_case.after_store(session, {item.subject_key: value})
    return interaction_id


def accept(
    session: Session, item_id: int, use_cases: Mapping[str, UseCase], note: str | None = None
) -> Verdict:
    item = review.get_open_item(session, item_id)
    use_case = _use_case(item, use_cases)
    if item.output is None:
        raise CorrectionError(f"review item {item_id} has no output to accept; correct it instead")
    delivered = False
    interaction_id = None
    stored = review.current_output(session, item.use_case, item.subject_key)
    if stored is None and _deliverable(session, item, use_case):  # a blocked output the reviewer vouches for
        interaction_id = _deliver(session, item, use_case, item.output, f"pipeline review accept {item_id}")
        delivered = True
    correction_id = review.add_correction(
        session,
        use_case=item.use_case,
        subject_key=item.subject_key,
        use_case_version=item.use_case_version,
        verdict="accepted",
        original=item.output,
        corrected=item.output,
        note=note,
        review_item_id=item.id,
        interaction_id=interaction_id,
    )
    review.resolve_item(session, item, "accepted", note)
    return Verdict(item.id, item.use_case, item.subject_key, "accepted", delivered, correction_id)


def reject(session: Session, item_id: int, note: str | None = None) -> Verdict:
    item = review.get_open_item(session, item_id)
    review.resolve_item(session, item, "rejected", note)
    return Verdict(item.id, item.use_case, item.subject_key, "rejected", False)


def correct(
    session: Session, item_id: int, use_cases: Mapping[str, UseCase], edits: Edits, note: str | None = None
) -> Verdict:
    item = review.get_open_item(session, item_id)
    use_case = _use_case(item, use_cases)
    if edits.empty:
        raise CorrectionError(
            f"say what to correct: {use_case.name} takes {flags(edit_options(use_case.quality.review_edits))}"
        )
    original = item.output or {}
    subject = _subject(session, use_case, item.subject_key)
    corrected = apply_edits(session, item, use_case, original, subject, edits)
    if corrected == original:
        raise CorrectionError(
            f"the correction leaves review item {item_id}'s output as it was; use `pipeline review accept "
            f"{item_id}` to confirm it"
        )
    delivered = _deliverable(session, item, use_case)
    interaction_id = (
        _deliver(session, item, use_case, corrected, f"pipeline review correct {item_id} {edits.describe()}")
        if delivered
        else None
    )
    correction_id = review.add_correction(
        session,
        use_case=item.use_case,
        subject_key=item.subject_key,
        use_case_version=item.use_case_version,
        verdict="corrected",
        original=item.output,
        corrected=corrected,
        note=note,
        review_item_id=item.id,
        interaction_id=interaction_id,
    )
    review.resolve_item(session, item, "corrected", note)
    return Verdict(item.id, item.use_case, item.subject_key, "corrected", delivered, correction_id)


def apply_edits(
    session: Session,
    item: ReviewItem,
    use_case: UseCase,
    original: dict[str, Any],
    subject: Mapping[str, Any],
    edits: Edits,
) -> dict[str, Any]:
    """The corrected output; CorrectionError when an option does not fit or the result is invalid."""
    value = json.loads(json.dumps(original))
    where = f"review item {item.id} ({item.use_case}, {use_case.subject.noun} {item.subject_key})"
    context = CorrectionContext(subject, where, session)
    for name in edits.names:
        if not any(name in edit.option_names for edit in use_case.quality.review_edits):
            raise CorrectionError(
                f"{where}: --{name} does not apply to {use_case.name} outputs "
                f"(they take {flags(edit_options(use_case.quality.review_edits))})"
            )
    for edit in use_case.quality.review_edits:
        if edit.option_names & set(edits.names):
            value = edit.apply(value, edits, context)
    try:
        use_case.validate_output(value)
    except jsonschema.ValidationError as exc:
        path = "/".join(str(part) for part in exc.absolute_path) or "the output"
        raise CorrectionError(
            f"{where}: the correction breaks the output schema at {path}: {exc.message}"
        ) from exc
    blocked = first_blocking_failure(use_case.checks, value, subject)
    if blocked is not None:
        raise CorrectionError(
            f"{where}: the correction fails the blocking check {blocked.check}: {blocked.reason}"
        )
    return value
