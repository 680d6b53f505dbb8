"""Secrets out of everything we print, log, raise or store: the one redaction function.

A password in a database URL (`postgresql://user:s3cret@host/db`), credentials in a server URL
(`http://user:pw@gpu-box:11434`, `https://TOKEN@host`), `password=...`/`api_key=...` pairs, bearer tokens,
and the values of secret-looking environment variables (`*_API_KEY`, `*PASSWORD*`, `*TOKEN*`,
`*SECRET*`, and the passwords inside the URL variables) become `***`. A user name is not a secret:
`postgresql://postgres@host/db` stays as it is. It lives in the bottom layer so the stores (pauses,
events, work items, interactions), the resources' errors and the CLI's output all use it.

The environment's secrets are handed over once by the settings module, the one reader of the
environment (`remember_environment`), not read here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from urllib.parse import unquote

MASK = "***"
# scheme://user:password@ as SQLAlchemy's make_url reads it: the user runs to the first ":" (no "/"),
# the password from there to the "@" before the host. The password may hold any character but
# whitespace (`/ # ? ' " < >` and "@" too), so it runs to the last "@" of the URL: a URL with more than
# one "@" is not one SQLAlchemy can use, and everything before its last "@" is masked.
_URL_CREDENTIALS = re.compile(
    r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.\-]*://)"
    r"(?:(?P<user>[^\s:/@]*):(?P<password>\S*)|(?P<userinfo>\S*))@"
)
_SECRET_PAIRS = re.compile(
    r"(?i)(?P<key>\b(?:password|passwd|pwd|api[_-]?key|access[_-]?token|auth[_-]?token|token|secret)"
    r"(?:\s*=\s*|[\"']\s*:\s*)[\"']?)(?P<value>[^\s&\"',;)}\]]+)"
)
_BEARER = re.compile(r"(?i)\b(?P<key>bearer\s+)(?P<value>[A-Za-z0-9._~+/=\-]{4,})")
_SECRET_NAMES = re.compile(r"(?i)(PASSWORD|PASSWD|SECRET|TOKEN|API_?KEY)")
# the environment variables that hold URLs with possible credentials (pipeline_defs/settings.py)
URL_VARIABLES = (
    "PIPELINE_DATABASE_URL",
    "PIPELINE_DAGSTER_POSTGRES_URL",
    "OLLAMA_HOST",
    "PIPELINE_LLM_HOSTS",
    "PIPELINE_OPENAI_BASE_URL",
)
# those of them that hold one URL, whose password may then hold even whitespace (a list of hosts cannot)
SINGLE_URL_VARIABLES = frozenset(URL_VARIABLES) - {"PIPELINE_LLM_HOSTS"}
_PLAIN_WORD = re.compile(r"[A-Za-z]+")
# a known secret shorter than this is masked only where it sits in a URL or a pair (not everywhere)
MIN_LITERAL_SECRET = 6


_remembered: list[str] = []
_remembered_url_passwords: list[str] = []


def remember_environment(environ: Mapping[str, str]) -> None:
    """Keep the secret values of this environment (the settings module calls this when it reads it)."""
    _remembered[:] = known_secrets(environ)
    _remembered_url_passwords[:] = _environment_url_passwords(environ)


def redact(text: str, environ: Mapping[str, str] | None = None) -> str:
    """`text` with every credential we can recognise replaced by `***` (idempotent); `environ`: look for
    the secrets of that environment instead of the remembered one."""
    if not text:
        return text
    # first the configured URLs' passwords of any length and content where they stand as one (`:PW@`):
    # the pattern below ends a URL at whitespace, which such a password may hold
    for password in _remembered_url_passwords if environ is None else _environment_url_passwords(environ):
        text = text.replace(f":{password}@", f":{MASK}@")
    text = _URL_CREDENTIALS.sub(_mask_userinfo, text)
    text = _SECRET_PAIRS.sub(lambda match: match["key"] + MASK, text)
    text = _BEARER.sub(lambda match: match["key"] + MASK, text)
    for secret in _remembered if environ is None else known_secrets(environ):
        text = _mask_literal(text, secret)
    return text


def _mask_literal(text: str, secret: str) -> str:
    """`text` with a known secret masked where it is written. A secret that is a plain word (such as
    `postgres`) is masked only as a whole word: inside `postgresql` it is not the secret."""
    if _PLAIN_WORD.fullmatch(secret):
        return re.sub(rf"(?<![A-Za-z0-9]){re.escape(secret)}(?![A-Za-z0-9])", MASK, text)
    return text.replace(secret, MASK)


def url_passwords(text: str) -> list[str]:
    """The passwords (and bare web tokens) written in the URLs of `text`; a user name is none."""
    return [secret for match in _URL_CREDENTIALS.finditer(text) if (secret := _secret_of(match))]


def known_secrets(environ: Mapping[str, str]) -> list[str]:
    """Secret values of this environment, longest first: secret-named variables and URL passwords.

    A value that is also the user name of a configured URL (`PGPASSWORD=postgres` beside
    `postgresql://postgres@host/db`) is masked only where it stands as a password (in a URL, in a
    `password=` pair): a user name is printed in every URL by design, so masking it elsewhere hides
    nothing and garbles every line that names the user."""
    found: set[str] = set(_environment_url_passwords(environ))
    users: set[str] = set()
    for name in URL_VARIABLES:
        for match in _URL_CREDENTIALS.finditer(environ.get(name) or ""):
            secret = _secret_of(match)
            if secret:
                found |= {secret, unquote(secret)}
            user = _user_of(match)
            if user is not None:
                users |= {user, unquote(user)}
    for name, value in environ.items():
        if value and _SECRET_NAMES.search(name) and not value.startswith(("/", "http")):
            found.add(value)
    return sorted(
        (s for s in found if len(s) >= MIN_LITERAL_SECRET and s != MASK and s not in users),
        key=len,
        reverse=True,
    )


def _environment_url_passwords(environ: Mapping[str, str]) -> list[str]:
    """The passwords of the URL variables that hold one URL, as written and percent-decoded, longest
    first. The whole value is the URL, so its userinfo runs from `://` to the last `@` and its
    password from the first `:` in it, whatever it holds (whitespace too, which text around a URL
    cannot tell from the URL's end). A password with an unescaped `@` also gives what follows each of
    its `@`: SQLAlchemy ends the password at the first one and takes the rest for the host name, which
    a connection error then prints."""
    found: set[str] = set()
    for name in SINGLE_URL_VARIABLES:
        _, separator, rest = (environ.get(name) or "").strip().partition("://")
        userinfo, at, _ = rest.rpartition("@")
        _, colon, password = userinfo.partition(":")
        if separator and at and colon and password:
            pieces = password.split("@")
            tails = {"@".join(pieces[start:]) for start in range(len(pieces))}
            found |= tails | {unquote(tail) for tail in tails}
    return sorted(found - {MASK}, key=len, reverse=True)


def _secret_of(match: re.Match[str]) -> str:
    """The secret in a URL's userinfo: the password of `user:password`; a bare userinfo in a web URL
    (`https://TOKEN@host`), where it is a token, or one no URL parser reads as a user name (a "/" or
    an "@" in it); not a plain user name in a database URL (`postgresql://postgres@`)."""
    if match["password"] is not None:
        return match["password"]
    userinfo = match["userinfo"]
    if match["scheme"].lower().startswith("http") or "/" in userinfo or "@" in userinfo:
        return userinfo
    return ""


def _user_of(match: re.Match[str]) -> str | None:
    """The user name a URL's userinfo shows (not a secret), or None when it names none."""
    if match["password"] is not None:
        return match["user"]
    return None if _secret_of(match) else match["userinfo"]


def _mask_userinfo(match: re.Match[str]) -> str:
    if not _secret_of(match):
        return match.group(0)
    masked = f"{match['user']}:{MASK}" if match["password"] is not None else MASK
    return f"{match['scheme']}{masked}@"
