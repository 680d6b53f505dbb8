"""Planted bad summaries, made by rules from a real one: what a judge must flag.

Each *invented* variant adds one fact the posting does not state, of the kinds small models
invent (issue 17: "a small company with 10 employees", "ISO 9001 certified since 1986"):
a headcount, a founding year, a certification, another company, another place, another role.
The values are drawn with a seeded generator, from fixed lists (numbers, years, standards) or
from *other* postings (companies, places, titles), and a value the posting itself states is
never drawn: a planted fact is invented by construction, not picked for being easy to catch.
The *detail* variant (`plant_detail`, apart from the calibration set's kinds) adds a lower-case
specific phrase taken from another posting ("refrigerated distribution centre", "tachograph
records"), the kind of invention a small model writes ("homecare centre", "dementia"), with none
of its specific words in the posting.
Each *looping* variant is what a looping small model writes: the title over and over, or the
summary's opening words repeated.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping, Sequence
from typing import Any

from plugins.postings.quality.faithfulness import Evidence, detail_phrases, is_specific, tokens

INVENTED_KINDS = ("headcount", "founding_year", "certification", "other_company", "other_place", "other_role")
LOOPING_KINDS = ("title_loop", "opening_loop")
HEADCOUNTS = (8, 10, 12, 25, 40, 60, 120, 250, 400, 900, 1500, 3000, 12000)
CERTIFICATIONS = ("ISO 9001", "ISO 27001", "ISO 14001", "ISO 45001", "SOC 2", "B Corp")


def _mentions(posting: Mapping[str, Any], value: str) -> bool:
    text = " ".join(str(posting.get(name) or "") for name in ("title", "company", "location", "description"))
    return bool(re.search(r"(?<!\w)" + re.escape(value.lower()) + r"(?!\w)", text.lower()))


def _draw(rng: random.Random, values: Sequence[Any], posting: Mapping[str, Any]) -> Any:
    """A value the posting does not state (in the order a seeded shuffle gives)."""
    candidates = list(values)
    rng.shuffle(candidates)
    for value in candidates:
        if value and not _mentions(posting, str(value)):
            return value
    raise ValueError(f"every candidate value is stated in posting {posting.get('key')!r}")


def _city(location: str) -> str:
    return location.split(",")[0].split("(")[0].strip()


def _replace_or_add(summary: str, old: str, new: str, sentence: str) -> str:
    """`old` replaced by `new` where the summary says it, else `sentence` added at the end."""
    if old and re.search(re.escape(old), summary, re.IGNORECASE):
        return re.sub(re.escape(old), new, summary, count=1, flags=re.IGNORECASE)
    return f"{summary.rstrip()} {sentence}"


def _after_company(summary: str, company: str, clause: str, sentence: str) -> str:
    """`clause` right after the company's name when the summary opens with it, else `sentence` added."""
    if company and summary.startswith(company):
        rest = summary[len(company) :].lstrip(",")
        return f"{company}, {clause},{'' if rest.startswith(' ') else ' '}{rest}"
    return f"{summary.rstrip()} {sentence}"


def plant_invented(
    summary: str, posting: Mapping[str, Any], others: Sequence[Mapping[str, Any]], seed: int = 0
) -> dict[str, str]:
    """One variant of `summary` per invented kind, each with one fact `posting` does not state."""
    rng = random.Random(f"{seed}/{posting.get('key')}/{summary}")
    company = str(posting.get("company") or "")
    headcount = _draw(rng, HEADCOUNTS, posting)
    year = _draw(rng, range(1950, 2016), posting)
    certification = _draw(rng, CERTIFICATIONS, posting)
    other_company = _draw(rng, [str(o.get("company") or "") for o in others], posting)
    other_city = _draw(rng, [_city(str(o.get("location") or "")) for o in others], posting)
    other_title = _draw(rng, [str(o.get("title") or "") for o in others], posting)
    return {
        "headcount": _after_company(
            summary,
            company,
            f"a small company with {headcount} employees",
            f"The company has {headcount} employees.",
        ),
        "founding_year": _after_company(
            summary, company, f"founded in {year}", f"The company was founded in {year}."
        ),
        "certification": f"{summary.rstrip()} The company is {certification} certified.",
        "other_company": _replace_or_add(
            summary, company, other_company, f"The role is with {other_company}."
        ),
        "other_place": _replace_or_add(
            summary,
            _city(str(posting.get("location") or "")),
            other_city,
            f"The job is based in {other_city}.",
        ),
        "other_role": _replace_or_add(
            summary, str(posting.get("title") or ""), other_title, f"The role is {other_title}."
        ),
    }


def plant_detail(
    summary: str, posting: Mapping[str, Any], others: Sequence[Mapping[str, Any]], seed: int = 0
) -> str | None:
    """`summary` with a specific phrase of another posting's description added (none of its specific
    words in `posting`), or None when no other posting has one."""
    rng = random.Random(f"{seed}/detail/{posting.get('key')}/{summary}")
    evidence = Evidence.of(posting)
    candidates = [
        phrase
        for other in others
        for phrase in detail_phrases(str(other.get("description") or ""))
        if len(phrase.split()) >= 2
        and not any(is_specific(word) and evidence.has_word(word) for word in tokens(phrase))
    ]
    if not candidates:
        return None
    phrase = rng.choice(sorted(set(candidates)))
    return f"{summary.rstrip()} The work also involves {phrase}."


def plant_looping(summary: str, posting: Mapping[str, Any]) -> dict[str, str]:
    """The title six times over; the summary's first six words four times, then the rest."""
    words = summary.split()
    return {
        "title_loop": " ".join([str(posting.get("title") or "job")] * 6),
        "opening_loop": " ".join(words[:6] * 4 + words[6:]),
    }


# --- terms of the job (issue 64): what job seekers filter on --------------------------------------

TERM_KINDS = ("arrangement", "hours", "contract", "salary", "benefit", "puffery")
# Per kind, the sentences planted, each with the cues that mean a posting may state it already (then
# another sentence of the kind is drawn). The cues are deliberately broader than the checker's wordings
# (`employment_terms.py`): a planted term is invented by construction, or it is not planted.
TERM_PLANTS: dict[str, tuple[tuple[str, str], ...]] = {
    "arrangement": (
        ("The role is fully remote.", r"remote|home|telecommut|telework|anywhere|distributed"),
        ("It is a hybrid role, partly from home.", r"hybrid|remote|home|office"),
        ("The work is entirely on-site.", r"on.?site|office|in.?person|premises"),
    ),
    "hours": (
        ("The position is full-time.", r"full.?time|hours|per week|a week|fte"),
        ("It is a part-time job.", r"part.?time|hours|per week|a week|fte"),
    ),
    "contract": (
        ("It is a permanent position.", r"permanent|open.?ended|indefinite|unlimited"),
        ("The contract is temporary.", r"temporary|temp\b|interim|seasonal|fixed|short.?term|cover"),
        ("It is a fixed-term contract of one year.", r"fixed|temporary|interim|month|year contract"),
        ("The job is offered on a freelance basis.", r"freelanc|self.?employ|contractor|b2b|consultan"),
        ("The role is an internship.", r"intern\b|interns\b|internship|trainee|student|placement|graduate"),
    ),
    "salary": (
        ("It pays a good salary.", r"salar|pay\b|wage|compensation|remuneration|[$€£]|\d+k\b"),
        ("The salary is {figure} a year.", r"(?!x)x"),  # a figure the posting does not state
    ),
    "benefit": (
        ("Benefits include a company pension scheme.", r"pension|retire|401"),
        ("Staff get private health insurance.", r"health|medical|insurance|dental"),
        ("There is an annual bonus.", r"bonus|incentive|profit"),
        ("Employees receive stock options.", r"equity|stock|share|option"),
        ("A company car is provided.", r"\bcar\b|vehicle|\bvan\b"),
        ("Staff get a free gym membership.", r"\bgym|fitness|wellness|sport"),
        ("Free lunch is provided every day.", r"lunch|meal|food|canteen|breakfast"),
        ("Relocation support is offered.", r"relocat"),
        ("Paid holidays are generous.", r"holiday|vacation|leave|time off|\bpto\b"),
        ("Childcare support is offered.", r"child|daycare|kindergarten"),
    ),
    "puffery": (
        ("The company is the market leader in its field.", r"leader|leading|number one|#1|no\. ?1"),
        ("It has been named a top employer.", r"employer|place to work|award"),
        ("It offers a best-in-class workplace.", r"best|class"),
        ("The team works in a fast-paced environment.", r"fast|pace"),
    ),
}
SALARY_FIGURES = ("€38,000", "€45,000", "£52,000", "$61,000", "€72,000", "£29,500")


def plant_terms(summary: str, posting: Mapping[str, Any], seed: int = 0) -> dict[str, str]:
    """One variant of `summary` per term kind with one sentence stating a term of the job `posting`
    does not state (a kind is left out when every sentence of it might be stated)."""
    rng = random.Random(f"{seed}/terms/{posting.get('key')}/{summary}")
    text = " ".join(str(posting.get(name) or "") for name in ("title", "company", "location", "description"))
    text = text.lower()
    planted: dict[str, str] = {}
    for kind in TERM_KINDS:
        choices = [sentence for sentence, cues in TERM_PLANTS[kind] if not re.search(cues, text)]
        if not choices:
            continue
        sentence = rng.choice(choices)
        if "{figure}" in sentence:
            sentence = sentence.format(figure=_draw(rng, SALARY_FIGURES, posting))
        planted[kind] = f"{summary.rstrip()} {sentence}"
    return planted
