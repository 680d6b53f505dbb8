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
# scheme://userinfo@ : userinfo runs to the last "@" before the host (an unescaped "@" in a password)
_URL_CREDENTIALS = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.\-]*://)(?P<userinfo>[^\s/?#'\"<>]*)@")
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
_PLAIN_WORD = re.compile(r"[A-Za-z]+")
# a known secret shorter than this is masked only where it sits in a URL or a pair (not everywhere)
MIN_LITERAL_SECRET = 6


_remembered: list[str] = []


def remember_environment(environ: Mapping[str, str]) -> None:
    """Keep the secret values of this environment (the settings module calls this when it reads it)."""
    _remembered[:] = known_secrets(environ)


def redact(text: str, environ: Mapping[str, str] | None = None) -> str:
    """`text` with every credential we can recognise replaced by `***` (idempotent); `environ`: look for
    the secrets of that environment instead of the remembered one."""
    if not text:
        return text
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
    found: set[str] = set()
    users: set[str] = set()
    for name in URL_VARIABLES:
        for match in _URL_CREDENTIALS.finditer(environ.get(name) or ""):
            secret = _secret_of(match)
            if secret:
                found |= {secret, unquote(secret)}
            if ":" in match["userinfo"] or not match["scheme"].lower().startswith("http"):
                user = match["userinfo"].partition(":")[0]
                users |= {user, unquote(user)}
    for name, value in environ.items():
        if value and _SECRET_NAMES.search(name) and not value.startswith(("/", "http")):
            found.add(value)
    return sorted(
        (s for s in found if len(s) >= MIN_LITERAL_SECRET and s != MASK and s not in users),
        key=len,
        reverse=True,
    )


def _secret_of(match: re.Match[str]) -> str:
    """The secret in a URL's userinfo: the password of `user:password`; a bare userinfo only in a web
    URL (`https://TOKEN@host`), where it is a token, not in a database URL (`postgresql://postgres@`),
    where it is a user name."""
    userinfo = match["userinfo"]
    if ":" in userinfo:
        return userinfo.partition(":")[2]
    return userinfo if match["scheme"].lower().startswith("http") else ""


def _mask_userinfo(match: re.Match[str]) -> str:
    userinfo = match["userinfo"]
    if not _secret_of(match):
        return match.group(0)
    user, colon, _ = userinfo.partition(":")
    masked = f"{user}:{MASK}" if colon else MASK
    return f"{match['scheme']}{masked}@"
