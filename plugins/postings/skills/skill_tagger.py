"""A CRF span tagger for skill and knowledge mentions, trained on SkillSpan (see train_skill_tagger.py).

The text is cut into tokens with character offsets (`mention_grounding.tokenize`) and into
sentences (a line, or up to ".", "!" or "?"); each sentence is one CRF sequence. One CRF per
kind tags it in BIO (SkillSpan annotates skills and knowledge separately, and 347 tokens of
its train split are both), so a span can be a skill, knowledge or both. Features are the classic ones
of CRF named-entity taggers: the word, its stem, shape, affixes and those of its neighbours;
word clusters (`WordClusters`: words grouped by meaning, so that a word SkillSpan never shows
still shares weights with its neighbours in meaning); and optionally where the taxonomy's labels
match (`taxonomy_matcher`).

`SkillTagger.load()` reads the shipped model once (~20 ms); `tag(text)` then takes about 0.3 s
for a 4,500-character posting on a busy 2-core machine (benchmarks/skills_extraction.py).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pycrfsuite

from plugins.postings.skills.mention_grounding import MENTION_KINDS, Mention, Token, tokenize
from plugins.postings.skills.taxonomy_matcher import TaxonomyMatcher, token_key

MODEL_DIR = Path(__file__).resolve().parent / "models"
MODEL_NAME = "skill_tagger"
CLUSTERS_FILE = f"{MODEL_NAME}.clusters.tsv"
_SENTENCE_END_TOKENS = frozenset({".", "!", "?"})
# (start, end, probability that the token is inside a mention of either kind), per token of a text
TokenBelief = tuple[int, int, float]
_SHAPES = [(re.compile(r"[A-Z]"), "X"), (re.compile(r"[a-z]"), "x"), (re.compile(r"[0-9]"), "d")]


@dataclass(frozen=True)
class TaggerCard:
    """What the model card says the features are (the tagger computes the same at run time)."""

    window: int
    taxonomy_features: bool
    word_clusters: bool = False  # cards before the clusters have no such key

    @classmethod
    def from_json(cls, data: dict[str, object]) -> TaggerCard:
        features = data["features"]
        assert isinstance(features, dict)
        return cls(
            window=int(features["window"]),
            taxonomy_features=bool(features["taxonomy"]),
            word_clusters=bool(features.get("word_clusters", False)),
        )


class WordClusters:
    """Lower-cased word -> (coarse, fine) cluster ids, read from a TSV of `word<TAB>coarse<TAB>fine`.

    Built by the trainer (`train_skill_tagger.build_word_clusters`): MiniLM vectors of each word
    of a vocabulary (SkillSpan train, ESCO, SkillSkape train, MiniLM's own whole words), grouped by
    k-means. The tagger only reads the table, so tagging needs no embedding model.
    """

    def __init__(self, table: dict[str, tuple[int, int]]) -> None:
        self.table = table

    @classmethod
    def read(cls, path: Path) -> WordClusters:
        table: dict[str, tuple[int, int]] = {}
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            fields = line.split("\t")
            if len(fields) != 3 or not fields[1].isdigit() or not fields[2].isdigit():
                raise ValueError(f"{path}:{number}: expected word<TAB>coarse id<TAB>fine id, not {line!r}")
            table[fields[0]] = (int(fields[1]), int(fields[2]))
        return cls(table)

    def write(self, path: Path) -> None:
        lines = [f"{word}\t{coarse}\t{fine}" for word, (coarse, fine) in sorted(self.table.items())]
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")

    def get(self, word: str) -> tuple[int, int] | None:
        return self.table.get(word.lower())


def sentences(tokens: Sequence[Token], text: str) -> list[tuple[int, int]]:
    """[first, end) token ranges of the sentences: a new one after ".", "!", "?" or at a line break."""
    ranges: list[tuple[int, int]] = []
    first = 0
    for index in range(1, len(tokens) + 1):
        at_end = index == len(tokens)
        if (
            at_end
            or tokens[index - 1].text in _SENTENCE_END_TOKENS
            or "\n" in text[tokens[index - 1].end : tokens[index].start]
        ):
            if index > first:
                ranges.append((first, index))
            first = index
    return ranges


def shape(word: str) -> str:
    """ "Python" -> "Xx", "C++" -> "X+", "2021" -> "d": letter classes with repeats squeezed."""
    for pattern, letter in _SHAPES:
        word = pattern.sub(letter, word)
    return re.sub(r"(.)\1+", r"\1", word)


def _word_features(word: str, prefix: str) -> list[str]:
    lower = word.lower()
    return [f"{prefix}w={lower}", f"{prefix}stem={token_key(word)}", f"{prefix}shape={shape(word)}"]


def token_features(
    tokens: Sequence[Token],
    window: int = 2,
    taxonomy_tags: Sequence[str] | None = None,
    clusters: WordClusters | None = None,
) -> list[list[str]]:
    """The CRF features of each token of one sentence (strings: each present feature has weight 1)."""
    words = [token.text for token in tokens]
    lowers = [word.lower() for word in words]
    word_clusters = [clusters.get(word) for word in lowers] if clusters is not None else []
    features: list[list[str]] = []
    for index, word in enumerate(words):
        current = ["bias", *_word_features(word, "")]
        current += [f"pre3={lowers[index][:3]}", f"suf2={lowers[index][-2:]}", f"suf3={lowers[index][-3:]}"]
        current += [f"suf4={lowers[index][-4:]}", f"len={min(len(word), 8)}"]
        if word[:1].isupper():
            current.append("title")
        if word.isupper() and len(word) > 1:
            current.append("upper")
        if any(char.isdigit() for char in word):
            current.append("digit")
        if index == 0:
            current.append("first")
        if index == len(words) - 1:
            current.append("last")
        for offset in range(1, window + 1):
            for sign, neighbour in ((-1, index - offset), (1, index + offset)):
                name = f"{sign * offset:+d}:"
                if 0 <= neighbour < len(words):
                    current += _word_features(words[neighbour], name)
                else:
                    current.append(f"{name}pad")
        if index > 0:
            current.append(f"bi-1={lowers[index - 1]}|{lowers[index]}")
        if index + 1 < len(words):
            current.append(f"bi+1={lowers[index]}|{lowers[index + 1]}")
        if clusters is not None:
            current += _cluster_features(word_clusters, index)
        if taxonomy_tags is not None:
            current.append(f"tax={taxonomy_tags[index]}")
            for offset in (-1, 1):
                if 0 <= index + offset < len(words):
                    current.append(f"{offset:+d}:tax={taxonomy_tags[index + offset]}")
        features.append(current)
    return features


def _cluster_features(word_clusters: Sequence[tuple[int, int] | None], index: int) -> list[str]:
    """The token's coarse and fine cluster, and the coarse clusters of two neighbours each side
    (the setting chosen on SkillSpan dev, against adding finer or bigram cluster features)."""
    own = word_clusters[index]
    features = [f"cl={own[0]}", f"cl_fine={own[1]}"] if own else ["cl=none"]
    for offset in (-2, -1, 1, 2):
        neighbour = index + offset
        found = word_clusters[neighbour] if 0 <= neighbour < len(word_clusters) else None
        if found is not None:
            features.append(f"{offset:+d}:cl={found[0]}")
    return features


def taxonomy_tags(text: str, tokens: Sequence[Token], matcher: TaxonomyMatcher) -> list[str]:
    """BIO tags of the taxonomy matches over the tokens, typed by the label's kind ("B-knowledge")."""
    tags = ["O"] * len(tokens)
    for found in matcher.match(text, list(tokens)):
        kind = found.label.kind or "any"
        tags[found.first] = f"B-{kind}"
        for index in range(found.first + 1, found.last + 1):
            tags[index] = f"I-{kind}"
    return tags


def is_punctuation(word: str) -> bool:
    return not any(char.isalnum() for char in word)


def spans_of_tags(tags: Sequence[str]) -> list[tuple[int, int]]:
    """[first, end) token ranges of a BIO sequence (an I after O opens a span)."""
    spans: list[tuple[int, int]] = []
    start: int | None = None
    for index, tag in enumerate([*tags, "O"]):
        if start is not None and tag != "I":
            spans.append((start, index))
            start = None
        if tag == "B" or (tag == "I" and start is None):
            start = index
    return spans


class SkillTagger:
    """The trained CRFs (one per kind), loaded once; `tag` finds the mentions of a text."""

    def __init__(self, model_dir: Path | str = MODEL_DIR, matcher: TaxonomyMatcher | None = None) -> None:
        model_dir = Path(model_dir)
        card_path = model_dir / f"{MODEL_NAME}.json"
        if not card_path.is_file():
            raise FileNotFoundError(
                f"no skill tagger model card at {card_path}: train one with "
                "`python -m training.train_skill_tagger`"
            )
        self.card = json.loads(card_path.read_text(encoding="utf-8"))
        self.config = TaggerCard.from_json(self.card)
        if self.config.taxonomy_features and matcher is None:
            raise ValueError(
                "this tagger model was trained with taxonomy features: pass the taxonomy matcher"
            )
        self.matcher = matcher if self.config.taxonomy_features else None
        self.clusters: WordClusters | None = None
        if self.config.word_clusters:
            clusters_path = model_dir / CLUSTERS_FILE
            if not clusters_path.is_file():
                raise FileNotFoundError(
                    f"the tagger model at {model_dir} was trained with word clusters, but "
                    f"{clusters_path} is missing: retrain with `python -m training.train_skill_tagger`"
                )
            self.clusters = WordClusters.read(clusters_path)
        self._taggers: dict[str, pycrfsuite.Tagger] = {}
        for kind in MENTION_KINDS:
            tagger = pycrfsuite.Tagger()
            tagger.open(str(model_dir / f"{MODEL_NAME}.{kind}.crfsuite"))
            self._taggers[kind] = tagger

    @classmethod
    def load(cls, matcher: TaxonomyMatcher | None = None) -> SkillTagger:
        """The model shipped in the package."""
        return cls(MODEL_DIR, matcher)

    def tag(self, text: str, field: str = "description") -> list[Mention]:
        """The skill and knowledge mentions the CRFs find in `text`, in order, with their offsets."""
        return self.tag_detailed(text, field)[0]

    def tag_detailed(self, text: str, field: str = "description") -> tuple[list[Mention], list[TokenBelief]]:
        """The mentions of `tag`, and for every token how likely it is inside a mention of either kind
        (1 - the CRF marginal of O, the larger of the two kinds)."""
        tokens = tokenize(text)
        tax_tags = taxonomy_tags(text, tokens, self.matcher) if self.matcher is not None else None
        mentions: list[Mention] = []
        beliefs: list[TokenBelief] = []
        for first, end in sentences(tokens, text):
            sentence = tokens[first:end]
            features = token_features(
                sentence,
                self.config.window,
                tax_tags[first:end] if tax_tags is not None else None,
                self.clusters,
            )
            inside = [0.0] * len(sentence)
            for kind, tagger in self._taggers.items():
                tags = tagger.tag(features)
                mentions += mentions_of_tags(
                    text, sentence, tags, lambda i, t=tagger, g=tags: t.marginal(g[i], i), kind, field
                )
                labels = set(tagger.labels())
                for i in range(len(sentence)):
                    inside[i] = max(inside[i], 1.0 - tagger.marginal("O", i) if "O" in labels else 0.0)
            beliefs += [(t.start, t.end, p) for t, p in zip(sentence, inside, strict=True)]
        return sorted(mentions, key=lambda m: (m.start, m.end, m.kind)), beliefs


def mentions_of_tags(
    text: str,
    sentence: Sequence[Token],
    tags: Sequence[str],
    marginal: Callable[[int], float],
    kind: str,
    field: str,
) -> list[Mention]:
    """The mentions of one sentence's BIO tags of one kind, edge punctuation trimmed; a mention's score is the
    least marginal of its tags (`marginal(i)`: the probability of token i's tag)."""
    mentions = []
    for span_first, span_end in spans_of_tags(tags):
        while span_first < span_end and is_punctuation(sentence[span_first].text):
            span_first += 1
        while span_end > span_first and is_punctuation(sentence[span_end - 1].text):
            span_end -= 1
        if span_first == span_end:
            continue
        score = min(marginal(i) for i in range(span_first, span_end))
        start, stop = sentence[span_first].start, sentence[span_end - 1].end
        mentions.append(Mention(text[start:stop], kind, start, stop, "tagger", round(float(score), 3), field))
    return mentions
