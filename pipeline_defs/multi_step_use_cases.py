"""Two shipped examples of multi-step declarations, opt-in through settings (see `catalog.py`).

- `REFINED_POSTING_SUMMARY` (PIPELINE_SUMMARY_STYLE=refined): the summary as
  extract -> grade -> improve (at most 3 times) -> final. The grade is a script step:
  deterministic checks a reader can verify (length, names the role and the company,
  no number that is not in the posting, not a copy), because a 270M base model cannot
  grade reliably (a number or capitalized name that is not in the posting counts as
  invented); its feedback lists the problems found, and the improve prompt uses
  it. `final` keeps the best-graded version, and is also the fallback when the
  improve budget runs out.
- `ASSESSMENT_USE_CASES` (PIPELINE_EXTRA_USE_CASES=posting_assessment): three expert
  assessments of a posting side by side (seniority by rules, work mode and contract type
  by prompts) and an LLM synthesizer that waits for all three (`fan_out.fan_in`).

Prompts are few-shot completions with short JSON answers (JSON-schema grammars), so
they suit the embedded Gemma 3 270M base model and stay fast on a CPU.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pipeline_defs.declaration import UseCase
from pipeline_defs.fan_out import fan_in
from pipeline_defs.steps import Chain, LLMStep, Route, ScriptStep, StepContext
from pipeline_defs.use_cases import (
    POSTING_SUMMARY,
    SUMMARY_PROMPT,
    SUMMARY_SCHEMA,
    normalize_summary,
)

MODEL = "gemma3:270m"

# --- the refined summary: extract -> grade -> improve (bounded) -> final ---------------------------

GRADE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "passed": {"type": "boolean"},
        "score": {"type": "integer", "minimum": 0, "maximum": 5},
        "feedback": {"type": "string"},
    },
    "required": ["passed", "score", "feedback"],
}
MIN_SUMMARY_CHARS, MAX_SUMMARY_CHARS = 40, 400
_WORD = re.compile(r"[A-Za-z][A-Za-z+#.-]*")
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9+#&'-]*")
_TITLE_STOPWORDS = {"and", "for", "the", "with", "senior", "junior", "lead", "head", "night", "shift"}


def _squash(text: str) -> str:
    return " ".join(text.lower().split())


def _names_and_numbers(text: str) -> list[str]:
    """Numbers and capitalized words, except each sentence's first word (small models invent these)."""
    found = list(_NUMBER.findall(text))
    for sentence in re.split(r"(?<=[.!?;])\s+", text):
        found += [word for word in _NAME.findall(sentence)[1:] if word[0].isupper()]
    return found


def grade_summary(inputs: Mapping[str, Any], context: StepContext) -> dict[str, Any]:
    """Five checks of the current summary against the posting; the feedback lists every problem."""
    summary = inputs["current_summary"]["summary"]
    lowered = summary.lower()
    title, company = str(inputs["title"]), str(inputs["company"])
    posting = " ".join(str(inputs[name]) for name in ("title", "company", "location", "description"))
    problems: list[str] = []
    if not MIN_SUMMARY_CHARS <= len(summary) <= MAX_SUMMARY_CHARS:
        problems.append(
            f"Write one or two full sentences ({MIN_SUMMARY_CHARS} to {MAX_SUMMARY_CHARS} characters)."
        )
    if len(summary) >= MIN_SUMMARY_CHARS and _squash(summary) in _squash(posting):
        problems.append("Say it in your own words; do not copy the posting.")
    role_words = [w for w in _WORD.findall(title) if len(w) > 3 and w.lower() not in _TITLE_STOPWORDS]
    if role_words and not any(word.lower() in lowered for word in role_words):
        problems.append(f"Name the role: {title}.")
    if company.strip() and company != "not stated" and company.split()[0].lower() not in lowered:
        problems.append(f"Name the company: {company}.")
    invented = [word for word in _names_and_numbers(summary) if word.lower() not in posting.lower()]
    if invented:
        quoted = ", ".join(f'"{word}"' for word in dict.fromkeys(invented[:3]))
        problems.append(
            f"Remove {quoted}: {'it is' if len(set(invented[:3])) == 1 else 'they are'} not in the posting."
        )
    return {
        "passed": not problems,
        "score": 5 - len(problems),
        "feedback": " ".join(problems) if problems else "None.",
    }


def keep_best_summary(inputs: Mapping[str, Any], context: StepContext) -> dict[str, Any]:
    """The best-graded summary of this posting's chain (ties: the earliest, least rewritten one)."""
    graded: list[tuple[int, str]] = []
    latest: str | None = None
    for record in context.history:
        if record.output_name == "current_summary":
            latest = record.value["summary"]
        elif record.output_name == "grade" and latest is not None:
            graded.append((record.value["score"], latest))
    if not graded:
        return {"summary": inputs["current_summary"]["summary"]}
    best = max(score for score, _ in graded)
    return {"summary": next(summary for score, summary in graded if score == best)}


IMPROVE_PROMPT = """\
Draft summaries of job postings, each rewritten to follow the feedback, in JSON.

Title: Senior Data Engineer
Company: Nordwind Logistics
Posting: Our data platform team is looking for a Senior Data Engineer to build batch \
and streaming pipelines in Python, Spark and Airflow on AWS. You have 5+ years of \
experience with SQL and data modelling.
Draft: {"summary": "A logistics firm needs an engineer to build data pipelines."}
Feedback: Name the role: Senior Data Engineer.
Rewritten: {"summary": "Nordwind Logistics is hiring a Senior Data Engineer to build \
batch and streaming pipelines with Python, Spark and Airflow on AWS; it asks for 5+ \
years of SQL."}

Title: Registered Nurse, Night Shift
Company: St. Mary's Community Hospital
Posting: Join our acute medical ward as a Registered Nurse on permanent night shifts. \
You will assess and monitor patients, administer medication and keep accurate care \
records. NMC registration is required.
Draft: {"summary": "St. Mary's Community Hospital seeks a nurse with 10 years of experience."}
Feedback: Remove "10": it is not in the posting.
Rewritten: {"summary": "St. Mary's Community Hospital seeks an NMC-registered nurse for \
night shifts on an acute medical ward, assessing patients and giving medication."}

Title: Payroll Administrator
Company: Harbour Foods
Posting: Run the monthly payroll for 900 employees in Sage and answer staff questions.
Draft: {"summary": "We are looking for a Payroll Administrator to run the monthly payroll in Sage."}
Feedback: Name the company: Harbour Foods.
Rewritten: {"summary": "Harbour Foods is looking for a Payroll Administrator to run the \
monthly payroll for 900 employees in Sage."}

Title: {title}
Company: {company}
Posting: {description}
Draft: {"summary": "{current_summary.summary}"}
Feedback: {grade.feedback}
Rewritten:"""

SUMMARY_OPTIONS = {"temperature": 0.0, "max_tokens": 120, "repeat_penalty": 1.2}

REFINED_SUMMARY_CHAIN = Chain(
    steps=(
        LLMStep(
            "extract",
            MODEL,
            SUMMARY_PROMPT,
            SUMMARY_SCHEMA,
            output_name="current_summary",
            options=SUMMARY_OPTIONS,
            input_limits={"description": 3000},
            postprocess=normalize_summary,
            routes=(Route("grade"),),
        ),
        ScriptStep(
            "grade",
            grade_summary,
            output_schema=GRADE_SCHEMA,
            max_visits=4,
            routes=(Route("final", when="grade.passed == true", priority=1), Route("improve")),
        ),
        LLMStep(
            "improve",
            MODEL,
            IMPROVE_PROMPT,
            SUMMARY_SCHEMA,
            output_name="current_summary",
            max_visits=3,
            options=SUMMARY_OPTIONS,
            input_limits={"description": 2000},
            postprocess=normalize_summary,
            routes=(Route("grade"),),
        ),
        ScriptStep("final", keep_best_summary, output_schema=SUMMARY_SCHEMA),
    ),
    max_steps_per_posting=10,
    fallback="final",
)

REFINED_POSTING_SUMMARY = UseCase(
    name="posting_summary",  # the same asset as the plain summary: downstream readers keep working
    version="2026-11-22.1",
    description=(
        "A one- or two-sentence summary of each posting: extracted, graded by checks, improved "
        "at most 3 times until it passes, and the best-graded version kept."
    ),
    output_schema=SUMMARY_SCHEMA,
    steps=REFINED_SUMMARY_CHAIN,
    priority=POSTING_SUMMARY.priority,
    batch_size=POSTING_SUMMARY.batch_size,
    postprocess=normalize_summary,
    preview_field="summary",
    checks=POSTING_SUMMARY.checks,
)

# --- fan-out and fan-in: three expert assessments and a synthesizer ---------------------------------

_EXPERT_OPTIONS = {"temperature": 0.0, "max_tokens": 16, "repeat_penalty": 1.0}


def _label_schema(field_name: str, labels: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {field_name: {"type": "string", "enum": labels}},
        "required": [field_name],
        "additionalProperties": False,
    }


SENIORITY_LEVELS = ["entry", "mid", "senior", "lead", "not stated"]
_TITLE_CUES = (  # (level, pattern), first match wins
    ("lead", r"\b(head of|lead|director|chief)\b"),
    ("senior", r"\b(senior|principal|staff|sr\.?)\b"),
    ("entry", r"\b(junior|graduate|trainee|intern|apprentice)\b"),
)
_DESCRIPTION_CUES = (  # stricter: "you lead the migration" says nothing about seniority
    ("lead", r"\b(lead|manage) (a|the|our) team\b"),
    ("entry", r"\b(no (previous )?experience (is )?(needed|required)|graduate scheme|internship)\b"),
)
_YEARS = re.compile(r"\b(\d{1,2})\+?\s*(?:years?|yrs)\b", re.IGNORECASE)


def rate_seniority(inputs: Mapping[str, Any], context: Any) -> dict[str, Any]:
    """Seniority from cues in the title, then the description (team lead, N+ years), with the words
    that decided it. A rule, not a prompt: on the demo postings Gemma 3 270M answered "senior" for
    all 25."""
    title, description = str(inputs["title"]), str(inputs["description"])
    for text, cues in ((title, _TITLE_CUES), (description, _DESCRIPTION_CUES)):
        for level, pattern in cues:
            match = re.search(pattern, text, re.IGNORECASE)
            if match:
                return {"level": level, "evidence": match.group(0)}
    years = _YEARS.search(description)
    if years:
        count = int(years.group(1))
        level = "senior" if count >= 5 else "mid" if count >= 2 else "entry"
        return {"level": level, "evidence": years.group(0)}
    return {"level": "not stated", "evidence": ""}


POSTING_SENIORITY = UseCase(
    name="posting_seniority",
    version="2026-11-22.1",
    description="Expert 1 of 3 (a script): the seniority the posting asks for, and the words that say so.",
    function=rate_seniority,
    output_schema={
        "type": "object",
        "properties": {"level": {"enum": SENIORITY_LEVELS}, "evidence": {"type": "string"}},
        "required": ["level", "evidence"],
    },
    priority=8,
    batch_size=100,
)

POSTING_WORK_MODE = UseCase(
    name="posting_work_mode",
    version="2026-11-22.1",
    model=MODEL,
    description="Expert 2 of 3: where the work happens (on-site, hybrid, remote).",
    prompt="""\
Job postings, each followed by where the work happens in JSON: on-site, hybrid, remote or not stated.

Title: Warehouse Operative
Posting: Pick and pack orders at our Leeds warehouse on early shifts.
Answer: {"mode": "on-site"}

Title: Backend Developer
Posting: Fully remote team across Europe; we meet twice a year.
Answer: {"mode": "remote"}

Title: Data Analyst
Posting: Two days a week in our Berlin office, the rest from home.
Answer: {"mode": "hybrid"}

Title: Bookkeeper
Posting: Keep the books of a small bakery chain in Sage and prepare VAT returns.
Answer: {"mode": "not stated"}

Title: {title}
Posting: {description}
Answer:""",
    output_schema=_label_schema("mode", ["on-site", "hybrid", "remote", "not stated"]),
    options=_EXPERT_OPTIONS,
    input_limits={"description": 1500},
    priority=8,
)

POSTING_CONTRACT = UseCase(
    name="posting_contract",
    version="2026-11-22.1",
    model=MODEL,
    description="Expert 3 of 3: the kind of contract offered.",
    prompt="""\
Job postings, each followed by the kind of contract in JSON: permanent, fixed-term, \
freelance, internship or not stated.

Title: Marketing Intern
Posting: A six-month paid internship in our brand team.
Answer: {"contract": "internship"}

Title: Site Electrician
Posting: A permanent, full-time position with a company van and pension.
Answer: {"contract": "permanent"}

Title: Project Accountant
Posting: A 12-month maternity cover contract in our finance team.
Answer: {"contract": "fixed-term"}

Title: Copywriter
Posting: Freelance copywriter wanted for product pages, paid per article.
Answer: {"contract": "freelance"}

Title: Receptionist
Posting: Greet visitors, answer the phone and manage meeting rooms.
Answer: {"contract": "not stated"}

Title: {title}
Posting: {description}
Answer:""",
    output_schema=_label_schema(
        "contract", ["permanent", "fixed-term", "freelance", "internship", "not stated"]
    ),
    options=_EXPERT_OPTIONS,
    input_limits={"description": 1500},
    priority=8,
)

ASSESSMENT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "profile": {"type": "string", "minLength": 1, "maxLength": 300},
        "seniority": {"type": "string"},
        "work_mode": {"type": "string"},
        "contract": {"type": "string"},
    },
    "required": ["profile", "seniority", "work_mode", "contract"],
    "additionalProperties": False,
}
PROFILE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"profile": {"type": "string", "minLength": 1, "maxLength": 300}},
    "required": ["profile"],
    "additionalProperties": False,
}


def attach_expert_labels(output: dict[str, Any], inputs: Mapping[str, Any]) -> dict[str, Any]:
    """Store the three experts' labels next to the synthesized profile."""
    profile = " ".join(str(output["profile"]).split())
    if not profile:
        raise ValueError("the model returned an empty profile")
    return {
        "profile": profile,
        "seniority": inputs["posting_seniority"]["level"],
        "work_mode": inputs["posting_work_mode"]["mode"],
        "contract": inputs["posting_contract"]["contract"],
    }


ASSESSMENT_USE_CASES: tuple[UseCase, ...] = fan_in(
    (POSTING_SENIORITY, POSTING_WORK_MODE, POSTING_CONTRACT),
    name="posting_assessment",
    version="2026-11-22.1",
    model=MODEL,
    description="The synthesizer: one profile sentence from the three expert assessments.",
    prompt="""\
Job postings with three reviewers' notes, each followed by a one-sentence profile for a \
job seeker, in JSON.

Title: Head of Data Platform
Company: Nordwind Logistics
Seniority: lead
Work mode: hybrid
Contract: permanent
Profile: {"profile": "A permanent, hybrid lead role at Nordwind Logistics, heading the data platform team."}

Title: Night Nurse
Company: St. Mary's Community Hospital
Seniority: mid
Work mode: on-site
Contract: fixed-term
Profile: {"profile": "A fixed-term, on-site nursing role at St. Mary's Community Hospital \
for an experienced nurse."}

Title: {title}
Company: {company}
Seniority: {posting_seniority.level}
Work mode: {posting_work_mode.mode}
Contract: {posting_contract.contract}
Profile:""",
    generation_schema=PROFILE_SCHEMA,
    output_schema=ASSESSMENT_SCHEMA,
    postprocess=attach_expert_labels,
    options={"temperature": 0.0, "max_tokens": 60, "repeat_penalty": 1.2},
    preview_field="profile",
    priority=7,
)
