"""The terms of a job a summary may state only when the posting does: what job seekers filter on.

A *term* is a phrase that states how the job is done or rewarded, by category:
- arrangement: remote, hybrid, on-site;
- hours: full-time, part-time;
- contract: permanent, temporary, fixed-term, freelance, internship, apprenticeship;
- salary: a salary, wage, commission or pay mentioned at all (the figure is a number claim);
- benefit: pension, health insurance, paid leave, bonus, equity, company car, flexible hours ...,
  or "benefits" in general;
- puffery: the employer sold as a leader ("market leader", "top employer", "best-in-class").

Each wording maps to a canonical *value* ("work from home", "home office", "remote-friendly" are all
`remote`), and a summary's term is supported when the posting states the same value, in any of its
wordings: "remote" for a posting that says "work from home" is faithful, "part-time" for one that says
"full-time" is not, and neither is "remote" for one that says nothing about where the work is done. A
wording the posting negates ("not a remote role", "no remote work") supports nothing.

The wordings are written as regular expressions over folded text (lowercase, plain quotes); a hyphen
in a wording also matches a space or nothing ("full-time", "full time", "fulltime").
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from functools import cache


@dataclass(frozen=True)
class TermValue:
    """One canonical term: its category, its name, the wordings that state it, and the other values
    whose statement in a posting also supports it (a "fixed-term" contract is "temporary")."""

    category: str
    value: str
    wordings: tuple[str, ...]
    implied_by: tuple[str, ...] = ()


TERMS: tuple[TermValue, ...] = (
    # --- where the work is done
    TermValue(
        "arrangement",
        "fully remote",
        (r"(?:fully|100%|completely|entirely|only|exclusively) remote(?:ly)?", r"remote-only"),
        implied_by=("remote",),  # a posting that says "remote" in any words, not one that says "hybrid"
    ),
    TermValue(
        "arrangement",
        "remote",
        (
            r"remote(?:ly)?(?:-first|-friendly)?",
            r"work(?:ing)? (?:from|at) home",
            r"home-based",
            r"home office",
            r"wfh",
            r"telecommut\w*",
            r"tele-work\w*",
            r"work from anywhere",
        ),
        implied_by=("fully remote", "hybrid"),  # a hybrid job is partly remote
    ),
    TermValue("arrangement", "hybrid", (r"hybrid",)),
    TermValue(
        "arrangement",
        "fully on-site",
        (r"(?:fully|100%|completely|entirely|only|exclusively) (?:on-site|onsite|in-office|office-based)",),
        implied_by=("on-site",),  # not for a hybrid job
    ),
    TermValue(
        "arrangement",
        "on-site",
        (r"on-site", r"onsite", r"in-office", r"office-based", r"in the office", r"in-person", r"in person"),
        implied_by=("fully on-site", "hybrid"),  # a hybrid job is partly in the office
    ),
    # --- hours
    TermValue(
        "hours",
        "full-time",
        (r"full-time", r"(?:3[5-9]|4[0-8])-(?:hours|hrs|h)(?: a| per)? ?week"),
    ),
    TermValue("hours", "part-time", (r"part-time", r"reduced hours")),
    # --- contract
    TermValue(
        "contract",
        "permanent",
        (r"permanent", r"open-ended contract", r"indefinite(?: contract)?", r"unlimited contract"),
    ),
    TermValue(
        "contract",
        "temporary",
        (
            r"temporary",
            r"temp (?:role|job|position|contract)",
            r"interim",
            r"seasonal",
            r"short-term contract",
        ),
        implied_by=("fixed-term",),
    ),
    TermValue(
        "contract",
        "fixed-term",
        (r"fixed-term", r"\d+-(?:month|year) contract", r"contract of \d+ (?:months|years)"),
    ),
    TermValue(
        "contract",
        "freelance",
        (r"freelanc\w*", r"self-employed", r"independent contractor", r"contractors?", r"b2b contract"),
    ),
    TermValue(
        "contract",
        "internship",
        (r"internships?", r"interns?", r"work placement", r"placement year", r"working student"),
    ),
    TermValue("contract", "apprenticeship", (r"apprentice(?:ship)?s?", r"trainee(?:ship)?s?")),
    # --- pay (a figure is a number claim; this is pay mentioned at all)
    TermValue(
        "salary",
        "salary",
        (
            r"salar(?:y|ies)",
            r"wages?",
            r"remuneration",
            r"compensation(?: package)?",
            r"pay (?:rate|scale|band|range|package)",
            r"well-paid",
            r"paid well",
            r"(?:good|great|excellent|high|top) pay",
            r"commission",
        ),
    ),
    # --- benefits
    TermValue(
        "benefit",
        "pension",
        (
            r"pensions?(?: scheme| plan)?",
            r"pensionable",
            r"retirement (?:plan|scheme|savings)",
            r"401\(?k\)?",
            r"superannuation",
        ),
    ),
    TermValue(
        "benefit",
        "health insurance",
        (
            r"(?:private |supplementary )?(?:health|medical|healthcare)(?: care)? "
            r"(?:insurance|cover(?:age)?|plan)",
            r"private medical",
            r"health benefits",
        ),
        implied_by=("insurance",),
    ),
    TermValue("benefit", "dental", (r"dental(?: care| insurance| cover| plan)?",), implied_by=("insurance",)),
    TermValue(
        "benefit", "life insurance", (r"life (?:insurance|assurance|cover)",), implied_by=("insurance",)
    ),
    TermValue("benefit", "insurance", (r"insurances?",)),
    TermValue(
        "benefit",
        "paid leave",
        (
            r"(?:paid |annual )?holidays?(?: allowance| entitlement)?",
            r"vacations?(?: days)?",
            r"annual leave",
            r"paid leave",
            r"paid time off",
            r"pto",
            r"days off",
            r"sabbatical",
        ),
    ),
    TermValue(
        "benefit", "parental leave", (r"parental leave", r"maternity(?: leave)?", r"paternity(?: leave)?")
    ),
    TermValue(
        "benefit",
        "bonus",
        (r"bonus(?:es)?", r"incentive (?:scheme|plan)", r"profit-shar\w*"),
    ),
    TermValue("benefit", "equity", (r"equity", r"stock options?", r"share options?", r"esop", r"rsus?")),
    TermValue(
        "benefit",
        "company car",
        (r"company (?:car|vehicle|van)", r"car allowance", r"(?:service )?van provided", r"own service van"),
    ),
    TermValue("benefit", "relocation", (r"relocation(?: package| support| assistance)?",)),
    TermValue("benefit", "visa sponsorship", (r"visa (?:sponsorship|support)", r"sponsor (?:your|a) visa")),
    TermValue(
        "benefit",
        "training budget",
        (
            r"(?:training|learning|education|development) (?:budget|allowance)",
            r"paid training",
            r"full training",
        ),
    ),
    TermValue(
        "benefit", "gym", (r"gym(?: membership)?", r"fitness (?:allowance|membership)", r"wellness allowance")
    ),
    TermValue(
        "benefit",
        "meals",
        (r"free (?:lunch|lunches|meals?|food|breakfast|snacks)", r"meal (?:vouchers|allowance)", r"canteen"),
    ),
    TermValue("benefit", "childcare", (r"child ?care", r"daycare", r"kindergarten allowance")),
    TermValue(
        "benefit",
        "flexible hours",
        (
            r"flexible (?:working )?(?:hours|schedule|working|work|time|times)",
            r"flexi-time",
            r"flextime",
        ),
    ),
    TermValue("benefit", "four-day week", (r"(?:4|four)-day (?:work ?)?week",)),
    TermValue("benefit", "mileage", (r"mileage(?: paid| allowance)?",)),
    TermValue("benefit", "uniform", (r"uniforms? (?:provided|supplied)", r"free uniforms?")),
    TermValue("benefit", "staff discount", (r"(?:staff|employee) discounts?",)),
    TermValue(
        "benefit",
        "benefits",
        (r"benefits?(?: package)?(?! of)", r"perks", r"fringe benefits"),
        implied_by=("*benefit",),  # the posting states a benefit of its own
    ),
    # --- the employer sold
    TermValue(
        "puffery",
        "market leader",
        (
            r"(?:market|industry|world|global|european|category|sector|technology|international)-leaders?",
            r"(?:market|industry) leadership",
            r"leaders? in (?:its|the|their|our) (?:field|market|industry|sector|domain)",
            r"number one",
            r"no\. ?1",
            r"#1",
        ),
    ),
    TermValue(
        "puffery",
        "top employer",
        (
            r"top employer",
            r"best employer",
            r"employer of choice",
            r"(?:great|best|fantastic) place to work",
        ),
    ),
    TermValue(
        "puffery", "best-in-class", (r"best-in-class", r"first-class", r"second to none", r"unrivall?ed")
    ),
    TermValue("puffery", "fast-paced", (r"fast-paced",)),
)
BY_VALUE = {term.value: term for term in TERMS}
NEGATIONS = ("no", "not", "non", "without", "never")
"""A wording one of these words precedes is stated as not so ("not a remote role", "no remote work"),
with only `NEGATED_FILLERS` between them (so "not commission Fulltime" negates no hours)."""
NEGATED_FILLERS = ("a", "an", "the", "fully", "entirely", "currently", "really", "strictly", "yet", "offered")


def fold(text: str) -> str:
    """Lowercase, accents stripped, typographic quotes and dashes plain."""
    text = unicodedata.normalize("NFKD", text)
    text = "".join(char for char in text if not unicodedata.combining(char))
    return text.replace("’", "'").replace("‑", "-").replace("–", "-").lower()


def _regex(wording: str) -> str:
    # "full-time" = "full - time" = "full time" = "fulltime"; a range in a character class ("[5-9]") stays
    return re.sub(r"(?<=[a-z)+])-(?=[a-z(])", lambda _: r"(?:\s*-\s*|\s+|)", wording)


@cache
def _pattern() -> re.Pattern[str]:
    """All wordings as one alternation, each a named group of its value's index, grouped by the
    character they start with (a lookahead skips a group at once: one pass over a 700-word posting
    took 8 ms trying every wording at every word, 2 ms so)."""
    by_first: dict[str, list[tuple[int, str]]] = {}
    for index, term in enumerate(TERMS):
        for wording in term.wordings:
            for first in _first_characters(wording):
                by_first.setdefault(first, []).append((index, wording))
    groups = []
    for first, wordings in sorted(by_first.items()):
        wordings.sort(key=lambda item: -len(item[1]))  # the longest wording first
        body = "|".join(
            f"(?P<t{index}_{ord(first)}_{n}>{_regex(wording)})" for n, (index, wording) in enumerate(wordings)
        )
        groups.append(f"(?={re.escape(first)})(?:{body})")
    return re.compile(rf"(?<![\w-])(?:{'|'.join(groups)})(?![\w-])")


def _first_characters(wording: str) -> set[str]:
    """The characters a wording can start with: its first literal, or each branch's of a leading
    `(?:a|b)` group (an optional group adds what follows it)."""
    if not wording.startswith("(?:"):
        if wording.startswith("\\d"):
            return set("0123456789")
        return {wording[0]}
    depth, branches, start = 0, [], 3
    for position, char in enumerate(wording):
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth == 0:
                branches.append(wording[start:position])
                rest = wording[position + 1 :]
                break
        elif char == "|" and depth == 1:
            branches.append(wording[start:position])
            start = position + 1
    firsts = set().union(*(_first_characters(branch) for branch in branches if branch))
    if rest.startswith("?"):  # optional: the wording may start after it
        firsts |= _first_characters(rest[1:].lstrip())
    return firsts


@dataclass(frozen=True)
class TermMention:
    """A wording of a term in a text: its span (from the negating word when negated) and value."""

    start: int
    end: int
    value: str
    negated: bool

    @property
    def category(self) -> str:
        return BY_VALUE[self.value].category


def mentions(text: str) -> list[TermMention]:
    """The term wordings of `text`, in order; spans index `text`."""
    folded = fold(text)
    if len(folded) != len(text):  # a ligature or a combining mark: fold one character for one, spans stay
        folded = "".join(fold(char)[:1] or " " for char in text)
    found = []
    for match in _pattern().finditer(folded):
        name = next(name for name, value in match.groupdict().items() if value is not None)
        value = TERMS[int(name[1:].split("_")[0])].value
        negation = _negation_before(folded, match.start())
        start = negation if negation is not None else match.start()
        found.append(TermMention(start, match.end(), value, negation is not None))
    return found


def _negation_before(folded: str, position: int) -> int | None:
    """Where the negating word that governs the wording at `position` starts, if one does: it precedes
    the wording with only `NEGATED_FILLERS` between (no punctuation)."""
    offset = max(0, position - 60)
    for word in reversed(list(re.finditer(r"[a-z]+|[^a-z\s-]", folded[offset:position]))):
        if word.group(0) in NEGATIONS:
            return offset + word.start()
        if word.group(0) not in NEGATED_FILLERS:
            return None
    return None


@dataclass(frozen=True)
class PostingTerms:
    """What a posting says about the terms of the job: values stated, and values it negates."""

    stated: frozenset[str]
    negated: frozenset[str]

    @classmethod
    def of(cls, text: str) -> PostingTerms:
        found = mentions(text)
        return cls(
            frozenset(m.value for m in found if not m.negated), frozenset(m.value for m in found if m.negated)
        )

    def supports(self, value: str) -> bool:
        """A summary's term `value`: the posting states it, or a value that implies it."""
        if value in self.stated:
            return True
        for other in BY_VALUE[value].implied_by:
            if other.startswith("*"):
                if any(BY_VALUE[s].category == other[1:] for s in self.stated):
                    return True
            elif other in self.stated:
                return True
        return False

    def supports_negation(self, value: str) -> bool:
        """A summary saying the job is *not* `value`: the posting says so, or states another value of
        the same category ("not remote" for an on-site job)."""
        category = BY_VALUE[value].category
        return value in self.negated or any(
            BY_VALUE[s].category == category and s != value and category in SINGLE_VALUED for s in self.stated
        )

    def supports_claim(self, claim: str) -> bool:
        """Every term a summary's phrase states is supported (a phrase with none states nothing)."""
        return all(
            self.supports_negation(m.value) if m.negated else self.supports(m.value) for m in mentions(claim)
        )


SINGLE_VALUED = ("arrangement", "hours")
"""Categories where stating one value says the others do not hold (an on-site job is not remote)."""
