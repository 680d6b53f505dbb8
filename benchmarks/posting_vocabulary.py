"""The words a summary may use without stating a fact: what postings share, and skill verbs.

    python -m benchmarks.posting_vocabulary [--min-share 0.05] [--data-dir D]

Writes `plugins/postings/quality/posting_vocabulary.txt`, two lists built from public data that is neither
the demo set nor anything a benchmark scores:
- every word of the SkillSpan **train** postings (140 postings, tech and house) whose stem occurs in
  at least `--min-share` of them: "team", "support", "complex", "stakeholders" are how postings and
  summaries talk, while "dementia", "wireframes" or "centre" (in no SkillSpan train posting) name
  something the summarized posting must state;
- the verbs of ESCO's skills: a word that opens at least `MIN_VERB_LABELS` labels of
  skill/competence concepts and opens more labels than it appears in otherwise ("answer", "log",
  "resolve", "administer"): an activity a summary rewords ("resolving them" for "solve"), not a
  specific thing.
The faithfulness check's *detail* claims skip these words.
"""

from __future__ import annotations

import argparse
import csv
import json
from collections import Counter, defaultdict
from pathlib import Path

from benchmarks.report import shared_data_dir
from plugins.postings.quality.faithfulness import VOCABULARY_PATH, detail_stem, tokens

MIN_SHARE = 0.05
MIN_VERB_LABELS = 5
ESCO_SKILLS = Path("esco") / "skills_en_v1.1.1.csv"


def posting_texts(path: Path) -> list[str]:
    """SkillSpan's sentences joined per posting (keyed by source and idx)."""
    sentences: dict[tuple[str, int], list[str]] = defaultdict(list)
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            sentences[(row["source"], row["idx"])].append(" ".join(row["tokens"]))
    return ["\n".join(parts) for parts in sentences.values()]


def shared_words(texts: list[str], min_share: float) -> list[str]:
    """Words (alphabetic, 3+ letters) whose stem occurs in at least `min_share` of the texts."""
    document_frequency: Counter[str] = Counter()
    forms: dict[str, set[str]] = defaultdict(set)
    for text in texts:
        words = {word for word in tokens(text) if word.isalpha() and len(word) >= 3}
        for word in words:
            forms[detail_stem(word)].add(word)
        document_frequency.update({detail_stem(word) for word in words})
    needed = min_share * len(texts)
    return sorted(word for key, count in document_frequency.items() if count >= needed for word in forms[key])


def skill_verbs(path: Path, min_labels: int = MIN_VERB_LABELS) -> list[str]:
    """First words of ESCO skill/competence labels (preferred and alternative) that open at least
    `min_labels` of them and open more labels than they appear in elsewhere."""
    opening, elsewhere = Counter(), Counter()
    with path.open(encoding="utf-8", newline="") as handle:
        for row in csv.DictReader(handle):
            labels = [row["preferredLabel"], *(row.get("altLabels") or "").splitlines()]
            for label in labels:
                words = label.lower().split()
                if not words:
                    continue
                if row["skillType"] == "skill/competence":
                    opening[words[0]] += 1
                else:
                    elsewhere[words[0]] += 1
                elsewhere.update(words[1:])
    return sorted(
        word
        for word, count in opening.items()
        if word.isalpha() and count >= min_labels and count >= elsewhere[word]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--min-share", type=float, default=MIN_SHARE)
    parser.add_argument("--data-dir")
    parser.add_argument("--out", type=Path, default=VOCABULARY_PATH)
    args = parser.parse_args(argv)
    root = shared_data_dir(args.data_dir)
    texts = posting_texts(root / "skillspan" / "train.json")
    shared = shared_words(texts, args.min_share)
    verbs = skill_verbs(root / ESCO_SKILLS)
    lines = [
        "# Words a summary may use without stating a fact (benchmarks/posting_vocabulary.py).",
        f"# Words whose stem occurs in at least {args.min_share:.0%} of the {len(texts)} SkillSpan train "
        "postings:",
        *shared,
        f"# Verbs of ESCO v1.1.1 skills (open at least {MIN_VERB_LABELS} skill/competence labels, more than "
        "they appear otherwise):",
        *verbs,
    ]
    args.out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {len(shared)} shared words and {len(verbs)} skill verbs to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
