"""Terms of the job in summaries: planted ones flagged, faithful ones not (issue 64).

    python -m benchmarks.terms_claims [--sets demo,train,dev] [--data-dir D] [--out DIR]

A summary must not state a work arrangement, hours, contract type, pay, a benefit or employer
puffery the posting does not (`plugins/postings/quality/employment_terms.py`). On each set of postings
(the 25 demo postings; SkillSpan **train** postings, which the wordings were tuned on, and SkillSpan
**dev** postings, held out) it measures, with the deterministic check (`summary_faithful`'s checker,
exact matching, no LLM: no summaries are generated):

- flagged: a faithful base summary (the posting's first two sentences of six words or more) with
  one planted sentence per term kind (`planted.plant_terms`: a term the posting does not state, by
  cues broader than the checker's wordings): the share where the check flags a phrase it does not
  flag in the base summary. Before (the check without terms) and after.
- false flags: faithful summaries the check flags, of two sorts: (a) *sentences of the posting*
  that mention a term (by the same broad cues), each taken as a summary; (b) *paraphrases*: the
  base summary plus a sentence restating a term the posting states in other words ("The role is
  remote." for a posting that says "work from home"; `PARAPHRASES`, written apart from the
  checker's wordings). A term flagged there is a false flag.
"""

from __future__ import annotations

import argparse
import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

from benchmarks.report import DEFAULT_RESULTS_DIR, shared_data_dir, write_report
from benchmarks.skillspan_postings import skillspan_pipeline_postings
from plugins.postings.commands.demo_command import DEMO_POSTINGS
from plugins.postings.quality.faithfulness import FaithfulnessChecker
from plugins.postings.quality.planted import TERM_KINDS, TERM_PLANTS, plant_terms

MIN_BASE_WORDS = 6
# (what the posting says, a paraphrase a faithful summary may write): each pair states one term
PARAPHRASES: tuple[tuple[str, str], ...] = (
    (r"work(?:ing)? from home|home.?office|telework|remote", "The job can be done from home."),
    (r"work(?:ing)? from home|home.?office|telework|remote.?(?:first|friendly|only)", "The role is remote."),
    (r"\bhybrid\b", "The job mixes office days and remote days."),
    (r"full.?time", "It is a full time job."),
    (r"part.?time", "Part time work is possible."),
    (r"\bpermanent (?:position|role|contract|job|employment)", "The contract is permanent."),
    (r"\bfixed.?term", "The contract is temporary."),
    (r"\bpension", "A pension is part of the package."),
    (r"health insurance|medical insurance|private medical", "Health insurance is included."),
    (r"\bbonus", "A bonus is offered."),
    (r"\bsalary\b", "A salary is offered."),
    (r"stock options?|\bequity\b(?! and)", "Equity is part of the offer."),
    (r"flexible (?:working )?(?:hours|working|schedule)", "Working hours are flexible."),
    (r"\bvacation|\bholidays?\b|annual leave", "It includes paid vacation."),
    (r"maternity|paternity|parental leave", "Parental leave is offered."),
    (
        r"market leader|industry leader|world leader|global leader",
        "The company leads its market as a market leader.",
    ),
)
_CUES = "|".join(cues for plants in TERM_PLANTS.values() for _, cues in plants if cues != r"(?!x)x")


def demo_postings() -> list[dict[str, Any]]:
    return [
        json.loads(line) for line in DEMO_POSTINGS.read_text(encoding="utf-8").splitlines() if line.strip()
    ]


def sentences(posting: dict[str, Any]) -> list[str]:
    """The description's sentences (SkillSpan's are its lines)."""
    parts = re.split(r"\n+|(?<=[.!?])\s+(?=[A-Z])", str(posting.get("description") or ""))
    return [part.strip() for part in parts if part.strip()]


def base_summary(posting: dict[str, Any]) -> str:
    """A faithful summary: the first two sentences of the posting with six words or more."""
    long = [sentence for sentence in sentences(posting) if len(sentence.split()) >= MIN_BASE_WORDS]
    return " ".join(sentence.rstrip(".") + "." for sentence in long[:2])


def flags(checker: FaithfulnessChecker, summary: str, posting: dict[str, Any]) -> set[str]:
    return {
        f"{f.claim.kind}:{f.claim.text.lower()}"
        for f in checker.findings(summary, posting)
        if not f.supported
    }


def measure(postings: list[dict[str, Any]], checker: FaithfulnessChecker) -> dict[str, Any]:
    planted = Counter()
    caught = Counter()
    missed: list[str] = []
    sentence_cases = sentence_flags = paraphrase_cases = paraphrase_flags = 0
    false_flags: list[str] = []
    for posting in postings:
        base = base_summary(posting)
        if not base:
            continue
        before = flags(checker, base, posting)
        for kind, text in plant_terms(base, posting).items():
            planted[kind] += 1
            new = flags(checker, text, posting) - before
            if new:
                caught[kind] += 1
            else:
                missed.append(f"{posting['key']}: {text[len(base) :].strip()}")
        for sentence in sentences(posting):
            if re.search(_CUES, sentence.lower()):
                sentence_cases += 1
                found = {flag for flag in flags(checker, sentence, posting) if flag.startswith("term:")}
                if found:
                    sentence_flags += 1
                    false_flags.append(f"{posting['key']} sentence {sentence!r}: {sorted(found)}")
        description = str(posting.get("description") or "").lower() + " " + str(posting.get("location") or "")
        for cue, paraphrase in PARAPHRASES:
            if re.search(cue, description.lower()):
                paraphrase_cases += 1
                new = flags(checker, f"{base} {paraphrase}", posting) - before
                if new:
                    paraphrase_flags += 1
                    false_flags.append(f"{posting['key']} paraphrase {paraphrase!r}: {sorted(new)}")
    return {
        "postings": len(postings),
        "planted": dict(planted),
        "caught": dict(caught),
        "planted_total": sum(planted.values()),
        "caught_total": sum(caught.values()),
        "missed": missed,
        "posting_sentences": sentence_cases,
        "posting_sentences_flagged": sentence_flags,
        "paraphrases": paraphrase_cases,
        "paraphrases_flagged": paraphrase_flags,
        "false_flags": false_flags,
    }


def _share(part: int, whole: int) -> str:
    return f"{part}/{whole} ({100 * part / whole:.1f}%)" if whole else "0/0"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", default="demo,train,dev")
    parser.add_argument("--data-dir")
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    out_dir = Path(args.out) if args.out else DEFAULT_RESULTS_DIR
    sets: dict[str, list[dict[str, Any]]] = {}
    for name in args.sets.split(","):
        if name == "demo":
            sets["demo"] = demo_postings()
        else:
            source = shared_data_dir(args.data_dir) / "skillspan" / f"{name}.json"
            sets[f"skillspan {name}"] = skillspan_pipeline_postings(source)
    results: dict[str, Any] = {}
    lines = [
        "| postings | planted terms flagged: before | after | by kind (after) | false flags: posting "
        "sentences | paraphrases | all faithful |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, postings in sets.items():
        before = measure(postings, FaithfulnessChecker(None, terms=False))
        after = measure(postings, FaithfulnessChecker(None))
        results[name] = {"before": before, "after": after}
        by_kind = ", ".join(
            f"{kind} {after['caught'].get(kind, 0)}/{after['planted'].get(kind, 0)}" for kind in TERM_KINDS
        )
        faithful = after["posting_sentences"] + after["paraphrases"]
        false = after["posting_sentences_flagged"] + after["paraphrases_flagged"]
        lines.append(
            f"| {name} ({after['postings']}) | {_share(before['caught_total'], before['planted_total'])} | "
            f"{_share(after['caught_total'], after['planted_total'])} | {by_kind} | "
            f"{_share(after['posting_sentences_flagged'], after['posting_sentences'])} | "
            f"{_share(after['paraphrases_flagged'], after['paraphrases'])} | {_share(false, faithful)} |"
        )
    markdown = "\n".join(lines)
    print(markdown)
    for name, result in results.items():
        for line in result["after"]["missed"][:15]:
            print(f"missed ({name}): {line}")
        for line in result["after"]["false_flags"][:25]:
            print(f"false flag ({name}): {line}")
    write_report("terms_claims", results, markdown, out_dir)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
