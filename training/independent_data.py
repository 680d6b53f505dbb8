"""Data for a skill linker that knows no benchmark answers (issue 43): readers of ESCO's own labels,
descriptions and occupation–skill relations, O*NET 29.2 technology skills and SkillSpan **train**
spans, the concept prior counted from them, and the mention -> concept pairs the trainer learns from.

None of it reads SkillSkape (its 514 concepts are the Decorte test and dev gold labels) or the
Decorte labels. The Decorte validation *sentences* are read once, only to drop SkillSpan train
sentences that are the same text (13 TECH validation sentences are job-ad boilerplate that SkillSpan
train repeats verbatim); their labels are never read here.

Sources of pairs (`Pair.source`):
- "esco_alt": an ESCO alternative label as the mention, its concept the answer, with that label
  (and every label that is a re-spelling of it: the same content-word stems) hidden from the
  taxonomy while the pair is scored, so the linker must find the concept through its other labels,
  as for a mention that is no label; context: the concept's first description sentence, or the
  alternative label set into a SkillSpan train sentence in place of a span (that sentence is also
  a sentence-level query).
- "skillspan": SkillSpan train skill/knowledge spans that are (after `label_core`-like trimming)
  an ESCO preferred or alternative label, in their sentence; each also with the label hidden.
- "onet": O*NET technology examples ("PostgreSQL", "Microsoft Visio") that are ESCO labels, with
  the label hidden too.
- "esco_description": the first sentence of a concept's ESCO description as a sentence-level query.
"""

from __future__ import annotations

import csv
import io
import json
import random
import re
import zipfile
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from plugins.postings.store.taxonomy import normalize_label

ESCO_FILE = Path("esco") / "skills_en_v1.1.1.csv"
ESCO_RELATIONS_ZIP = Path("esco") / "ESCO_v1.1.1_relations_csv.zip"
OCCUPATION_SKILL_FILE = "occupationSkillRelations.csv"
ONET_TECHNOLOGY_FILE = Path("onet_29.2") / "Technology Skills.txt"
SKILLSPAN_TRAIN_FILE = Path("skillspan") / "train.json"
DECORTE_SENTENCE_FILES = (
    Path("decorte_esco_linked") / "tech_validation_annotations.csv",
    Path("decorte_esco_linked") / "house_validation_annotations.csv",
)
SOURCES = ("esco_alt", "skillspan", "onet", "esco_description")
PRIOR_SOURCES = ("esco_essential", "esco_optional", "onet", "skillspan")
_WRAPPING_LEAD = re.compile(
    r"^(?:(?:strong|good|excellent|solid|proven|sound|deep|basic|advanced|extensive|practical|hands-on|"
    r"working)\s+)*(?:(?:knowledge|understanding|experience|expertise|proficiency|familiarity|skills?)\s+"
    r"(?:of|in|with)\s+)?",
    re.IGNORECASE,
)
_WRAPPING_TAIL = re.compile(r"\s+(?:skills?|abilities|knowledge|experience|expertise)$", re.IGNORECASE)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")


@dataclass(frozen=True)
class EscoConcept:
    uri: str
    preferred_label: str
    alt_labels: tuple[str, ...]
    description: str
    skill_type: str
    reuse_level: str


def read_esco(path: Path) -> list[EscoConcept]:
    with path.open(newline="", encoding="utf-8") as handle:
        return [
            EscoConcept(
                row["conceptUri"],
                row["preferredLabel"].strip(),
                tuple(a.strip() for a in (row.get("altLabels") or "").splitlines() if a.strip()),
                (row.get("description") or "").strip(),
                row.get("skillType") or "",
                row.get("reuseLevel") or "",
            )
            for row in csv.DictReader(handle)
        ]


def label_lookup(concepts: Iterable[EscoConcept]) -> dict[str, set[str]]:
    """Normalized preferred or alternative label -> the concept URIs that carry it."""
    lookup: dict[str, set[str]] = defaultdict(set)
    for concept in concepts:
        for label in (concept.preferred_label, *concept.alt_labels):
            lookup[normalize_label(label)].add(concept.uri)
    return lookup


def occupation_counts(relations_zip: Path) -> dict[str, tuple[int, int]]:
    """Skill URI -> (occupations listing it as essential, as optional), from ESCO's relations."""
    essential: Counter[str] = Counter()
    optional: Counter[str] = Counter()
    with zipfile.ZipFile(relations_zip) as archive, archive.open(OCCUPATION_SKILL_FILE) as raw:
        for row in csv.DictReader(io.TextIOWrapper(raw, encoding="utf-8")):
            (essential if row["relationType"] == "essential" else optional)[row["skillUri"]] += 1
    return {uri: (essential[uri], optional[uri]) for uri in set(essential) | set(optional)}


def read_onet_examples(path: Path) -> dict[str, int]:
    """O*NET technology example -> how many occupations list it."""
    occupations: dict[str, set[str]] = defaultdict(set)
    with path.open(newline="", encoding="utf-8") as handle:
        for row in csv.DictReader(handle, delimiter="\t"):
            occupations[row["Example"].strip()].add(row["O*NET-SOC Code"])
    return {example: len(codes) for example, codes in occupations.items()}


@dataclass(frozen=True)
class SkillSpanSentence:
    posting: str  # "source:idx"
    text: str
    spans: tuple[str, ...]  # skill and knowledge spans, as written


def _spans(tokens: list[str], tags: list[str]) -> list[str]:
    found: list[list[str]] = []
    current: list[str] = []
    for token, tag in zip(tokens, tags, strict=False):
        if tag == "B":
            if current:
                found.append(current)
            current = [token]
        elif tag == "I" and current:
            current.append(token)
        else:
            if current:
                found.append(current)
            current = []
    if current:
        found.append(current)
    return [" ".join(words) for words in found]


def sentence_key(text: str) -> str:
    """How sentences are compared across data sets (tokenisation differs): lower-case words only."""
    return " ".join(re.findall(r"\w+", text.lower()))


def benchmark_sentence_keys(root: Path) -> set[str]:
    """The Decorte validation sentences (text only, labels not read), to keep them out of training."""
    keys: set[str] = set()
    for relative in DECORTE_SENTENCE_FILES:
        path = root / relative
        if path.is_file():
            with path.open(newline="", encoding="utf-8-sig") as handle:
                keys |= {sentence_key(row.get("sentence") or "") for row in csv.DictReader(handle)}
    return keys - {""}


def read_skillspan_train(path: Path, excluded: set[str] = frozenset()) -> tuple[list[SkillSpanSentence], int]:
    """SkillSpan train sentences with their spans; sentences whose key is in `excluded` are dropped
    (returned: the sentences and how many were dropped)."""
    sentences, dropped = [], 0
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            if not line.strip():
                continue
            row = json.loads(line)
            text = " ".join(row["tokens"])
            if sentence_key(text) in excluded:
                dropped += 1
                continue
            spans = _spans(row["tokens"], row["tags_skill"]) + _spans(row["tokens"], row["tags_knowledge"])
            sentences.append(SkillSpanSentence(f"{row['source']}:{row['idx']}", text, tuple(spans)))
    return sentences, dropped


def match_label(text: str, lookup: dict[str, set[str]]) -> tuple[str, set[str]] | None:
    """(the label matched, its concepts) when `text`, or `text` without words that name no skill
    ("knowledge of SQL", "communication skills"), is an ESCO label; else None."""
    for candidate in (text, _WRAPPING_TAIL.sub("", _WRAPPING_LEAD.sub("", text.strip(" .,;:!?•"))).strip()):
        uris = lookup.get(normalize_label(candidate))
        if candidate and uris:
            return normalize_label(candidate), uris
    return None


def first_sentence(description: str) -> str:
    return _SENTENCE_END.split(description.strip(), maxsplit=1)[0].strip() if description else ""


@dataclass(frozen=True)
class PriorCounts:
    """The prior's count of each concept (by preferred label) and its parts, by source."""

    total: dict[str, int]
    parts: dict[str, dict[str, int]]  # source -> preferred label -> count
    formula: str
    sources: dict[str, str] = field(default_factory=dict)


def independent_prior(
    concepts: list[EscoConcept],
    occupations: dict[str, tuple[int, int]],
    onet: dict[str, int],
    skillspan: list[SkillSpanSentence],
    lookup: dict[str, set[str]],
) -> PriorCounts:
    """How often each concept is asked for, counted without the benchmark: occupations that list it
    (essential, optional) in ESCO, O*NET occupations that list a technology that is one of its
    labels, SkillSpan train spans that are one of its labels."""
    by_uri = {c.uri: c.preferred_label for c in concepts}
    parts: dict[str, Counter[str]] = {source: Counter() for source in PRIOR_SOURCES}
    for uri, (essential, optional) in occupations.items():
        if uri in by_uri:
            for source, count in (("esco_essential", essential), ("esco_optional", optional)):
                if count:
                    parts[source][by_uri[uri]] += count
    for example, count in onet.items():
        for uri in lookup.get(normalize_label(example), ()):
            parts["onet"][by_uri[uri]] += count
    for sentence in skillspan:
        for span in sentence.spans:
            matched = match_label(span, lookup)
            for uri in matched[1] if matched else ():
                parts["skillspan"][by_uri[uri]] += 1
    total: Counter[str] = Counter()
    for counter in parts.values():
        total.update(counter)
    return PriorCounts(
        dict(total),
        {source: dict(counter) for source, counter in parts.items()},
        "occupations listing it essential + optional (ESCO v1.1.1 occupationSkillRelations) + O*NET "
        "29.2 occupations listing a technology that is one of its labels + SkillSpan train spans "
        "that are one of its labels",
        {
            "esco_essential": "ESCO v1.1.1 occupationSkillRelations.csv, relationType essential",
            "esco_optional": "ESCO v1.1.1 occupationSkillRelations.csv, relationType optional",
            "onet": "O*NET 29.2 Technology Skills.txt, Example equal to an ESCO label (normalized)",
            "skillspan": "SkillSpan train.json skill/knowledge spans equal to an ESCO label "
            "(normalized, wrapping words like 'knowledge of' dropped)",
        },
    )


@dataclass(frozen=True)
class Pair:
    """One training query: `mention` (or a whole sentence when `kind` is "sentence"), its context
    sentence (None: bare mention), the gold concept URIs, the normalized label to hide while it is
    scored (None: the taxonomy as it is), where it came from, and a group for held-out splits."""

    kind: str  # "mention", "bare_mention" or "sentence"
    mention: str
    context: str | None
    gold: frozenset[str]
    hidden_label: str | None
    source: str
    group: str
    context_source: str = ""  # "description", "ad" (a SkillSpan train sentence) or "" (none)
    also_hidden: tuple[str, ...] = ()  # more normalized labels hidden with `hidden_label`


def esco_alt_pairs(
    concepts: list[EscoConcept],
    lookup: dict[str, set[str]],
    ad_frames: list[tuple[str, str]],
    count: int,
    seed: int,
) -> list[Pair]:
    """`count` concepts (seeded sample), one alternative label each as a hidden-label mention: bare,
    in the description's first sentence as context, and set into a job-ad frame (a SkillSpan train
    sentence with one of its spans replaced), that frame also as a sentence-level query."""
    rng = random.Random(seed + 1)
    pairs = []
    for concept in sample_concepts(concepts, count, seed):
        alts = [
            a for a in concept.alt_labels if normalize_label(a) != normalize_label(concept.preferred_label)
        ]
        alt = rng.choice(alts)
        hidden = normalize_label(alt)
        gold = frozenset({concept.uri})
        group = f"esco:{concept.uri}"
        pairs.append(Pair("bare_mention", alt, None, gold, hidden, "esco_alt", group))
        sentence = first_sentence(concept.description)
        if sentence:
            pairs.append(Pair("mention", alt, sentence, gold, hidden, "esco_alt", group, "description"))
        if ad_frames:
            frame, span = rng.choice(ad_frames)
            context = frame.replace(span, alt, 1)
            pairs.append(Pair("mention", alt, context, gold, hidden, "esco_alt", group, "ad"))
            # the same job-ad sentence as a sentence-level query (the label hidden there too)
            pairs.append(Pair("sentence", context, None, gold, hidden, "esco_alt", group, "ad"))
    return pairs


def multi_skill_pairs(
    concepts: list[EscoConcept],
    sentences: list[SkillSpanSentence],
    count: int,
    seed: int,
    most: int = 4,
) -> list[Pair]:
    """Job-ad sentences naming several skills, as sentence-level queries: `count` SkillSpan train
    sentences with two or more spans, each span (at most `most`) replaced by an alternative label of
    a sampled concept; gold: those concepts, all their labels hidden (as in `esco_alt_pairs`).
    Decorte's sentences, like most job-ad sentences, name several skills at once."""
    rng = random.Random(seed + 2)
    pool = sample_concepts(concepts, len(concepts), seed)
    framed = [s for s in sentences if len({span for span in s.spans if span in s.text}) >= 2]
    pairs = []
    for sentence in rng.sample(framed, min(count, len(framed))):
        text, gold, hidden = sentence.text, set(), []
        for span in list(dict.fromkeys(span for span in sentence.spans if span in sentence.text))[:most]:
            concept, alt = random_alt_label(rng, pool)
            if span not in text:
                continue
            text = text.replace(span, alt, 1)
            gold.add(concept.uri)
            hidden.append(normalize_label(alt))
        if len(gold) >= 2:
            pairs.append(
                Pair(
                    "sentence",
                    text,
                    None,
                    frozenset(gold),
                    hidden[0],
                    "esco_alt",
                    f"frame:{sentence.posting}",
                    "ad",
                    tuple(hidden[1:]),
                )
            )
    return pairs


def description_pairs(concepts: list[EscoConcept], count: int, seed: int) -> list[Pair]:
    """`count` concepts' first description sentences as sentence-level queries (gold: the concept):
    the concepts `esco_alt_pairs` samples with the same seed, first (their sentences are embedded
    once for both), then others."""
    sampled = sample_concepts(concepts, len(concepts), seed)
    described = [c for c in sampled if first_sentence(c.description)]
    return [
        Pair(
            "sentence",
            first_sentence(c.description),
            None,
            frozenset({c.uri}),
            None,
            "esco_description",
            f"esco:{c.uri}",
        )
        for c in described[:count]
    ]


def random_alt_label(rng: random.Random, pool: list[EscoConcept]) -> tuple[EscoConcept, str]:
    """A concept drawn from `pool` and one of its alternative labels that is not a re-spelling of its
    preferred label (the mention a hidden-label query is built from)."""
    concept = rng.choice(pool)
    alts = [a for a in concept.alt_labels if normalize_label(a) != normalize_label(concept.preferred_label)]
    return concept, rng.choice(alts)


def sample_concepts(concepts: list[EscoConcept], count: int, seed: int) -> list[EscoConcept]:
    """A seeded sample of the concepts with an alternative label other than the preferred one."""
    usable = [
        c
        for c in concepts
        if any(normalize_label(a) != normalize_label(c.preferred_label) for a in c.alt_labels)
    ]
    random.Random(seed).shuffle(usable)  # the first `count` of one seeded order, whatever `count`
    return usable[:count]


def skillspan_pairs(sentences: list[SkillSpanSentence], lookup: dict[str, set[str]]) -> list[Pair]:
    """Spans that are ESCO labels, in their sentence and bare, as written and with the label hidden;
    and each sentence with such a span as a sentence-level query (gold: the concepts of those spans)."""
    pairs = []
    for sentence in sentences:
        gold_of_sentence: set[str] = set()
        for span in dict.fromkeys(sentence.spans):
            matched = match_label(span, lookup)
            if not matched:
                continue
            label, uris = matched
            gold = frozenset(uris)
            gold_of_sentence |= uris
            for hidden in (None, label):
                pairs.append(
                    Pair("mention", span, sentence.text, gold, hidden, "skillspan", sentence.posting, "ad")
                )
                pairs.append(Pair("bare_mention", span, None, gold, hidden, "skillspan", sentence.posting))
        if gold_of_sentence:
            pairs.append(
                Pair(
                    "sentence",
                    sentence.text,
                    None,
                    frozenset(gold_of_sentence),
                    None,
                    "skillspan",
                    sentence.posting,
                )
            )
    return pairs


def onet_pairs(onet: dict[str, int], lookup: dict[str, set[str]]) -> list[Pair]:
    """O*NET technology examples that are ESCO labels: bare mentions, as written and hidden."""
    pairs = []
    for example in sorted(onet):
        label = normalize_label(example)
        uris = lookup.get(label)
        if not uris:
            continue
        for hidden in (None, label):
            pairs.append(
                Pair("bare_mention", example, None, frozenset(uris), hidden, "onet", f"onet:{label}")
            )
    return pairs


def ad_frames(sentences: list[SkillSpanSentence]) -> list[tuple[str, str]]:
    """(sentence, span) of SkillSpan train: frames an alternative label is set into."""
    return [(s.text, span) for s in sentences for span in s.spans if span and span in s.text]
