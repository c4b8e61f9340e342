"""Secrets in destination specs: the public identity twice keeps, and the credentials it uses.

A destination spec may carry a password (``postgresql://etl:s3cret@db/warehouse#public.t`` or
``...?password=s3cret``). twice must never store or print it, yet must open the destination
with it. So a spec has two forms:

- its **public identity**, :func:`public_spec`: the same string with the password removed
  (``postgresql://etl@db/warehouse#public.t``; secret query parameters such as ``password=``
  dropped), everything else kept byte for byte. This is what a task's ``destination``, a unit
  of work (hence its ``uow_id`` and job ids), fingerprints' keys, leases, commit records,
  events, reports and messages carry. A spec without a password is its own public identity,
  so ledgers written before this existed keep their keys. The function is idempotent.
- its **connection spec**: the spec as the user wrote it. A task declaring a spec with a
  password registers it (:func:`remember`); ``twice.destinations.open_destination`` turns a
  public identity back into it (:func:`with_credentials`) and only the engine's connect call
  ever sees it. The registry lives in the process that loaded the pipeline (a spawned attempt
  loads the pipeline file again, so it registers the same specs). A public identity nobody
  registered opens as written: the engine's own sources (``PGPASSWORD``, ``~/.pgpass``) apply.

:func:`redact` masks passwords in free text (a driver's error message can echo the connection
string it was given): URL passwords, ``password=`` pairs, and every password registered here
(one made of word characters only where it stands as a word: a development password such as
``postgres`` leaves ``postgresql`` readable; one equal to the spec's user or database name only
in the URL's password field, since the public spec shows that name anyway).

Standard library only, like the rest of ``twice.core``.
"""

from __future__ import annotations

import re
import threading
from urllib.parse import quote, unquote

MASK = "***"

#: Query parameters whose value is a secret (libpq's ``password`` and ``sslpassword``, and the
#: usual names of tokens and keys). Compared case-insensitively.
SECRET_PARAMETERS = frozenset({
    "password", "sslpassword", "passwd", "pwd", "secret", "token", "access_token", "api_key",
    "apikey",
})

_lock = threading.Lock()
_registered: dict[str, str] = {}  # public identity -> the spec as written (with its password)
_secrets: set[str] = set()  # every password registered, as written and percent-decoded

#: A secret made of word characters only is masked where it stands as a word of its own, so
#: a common word used as a development password (``postgres``) leaves longer words readable;
#: any other secret is masked wherever it appears.
_WORD = re.compile(r"\w+")
#: The password of ``scheme://user:password@host``, up to the LAST ``@`` before the path: a
#: password holding an unescaped ``@`` is masked whole, not up to its first ``@``.
_URL_PASSWORD = re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.-]*://[^:/?#@\s]*:)[^/\s]*@")
_PAIR_NAMES = "|".join(sorted(SECRET_PARAMETERS, key=len, reverse=True))
_PASSWORD_PAIR = re.compile(
    rf"(?P<head>\b(?:{_PAIR_NAMES})\s*=\s*)(?:'(?:[^'\\]|\\.)*'|\"[^\"]*\"|[^\s&;,'\"#]+)",
    re.IGNORECASE,
)


def _split(spec: str) -> tuple[str, str, str, str, str] | None:
    """``(scheme+'://' or scheme+':', authority, path, query, fragment)`` of
    ``scheme://authority/path?query#fragment`` or of ``scheme:path?query#fragment`` (no
    authority: ``sqlite:rel/path``, ``bq:project.dataset.table``); None for a spec without a
    scheme."""
    scheme, colon, rest = spec.partition(":")
    if not colon or not re.fullmatch(r"[A-Za-z][A-Za-z0-9+.-]*", scheme):
        return None
    rest, hash_, fragment = rest.partition("#")
    rest, mark, query = rest.partition("?")
    if not rest.startswith("//"):
        return scheme + ":", "", rest, mark + query, hash_ + fragment
    rest = rest[2:]
    slash = rest.find("/")
    authority, path = (rest, "") if slash < 0 else (rest[:slash], rest[slash:])
    return scheme + "://", authority, path, mark + query, hash_ + fragment


def _secret_pairs(query: str) -> list[tuple[int, str]]:
    """Indexes and values of the secret parameters among ``query``'s ``&``-separated pairs."""
    found = []
    for index, pair in enumerate(query.split("&")):
        name, eq, value = pair.partition("=")
        if eq and unquote(name).strip().lower() in SECRET_PARAMETERS:
            found.append((index, value))
    return found


def _nested(value: str) -> str | None:
    """A query value that is itself a URL (``catalog_uri=postgresql://...``), percent-decoded
    if need be; None for any other value."""
    for form in (value, unquote(value)):
        if "://" in form:
            return form
    return None


def secrets_of(spec: str) -> tuple[str, ...]:
    """The non-empty secrets ``spec`` carries (as written; percent-decoded too if different),
    those of a URL given as a query value included."""
    parts = _split(spec) if isinstance(spec, str) else None
    if parts is None:
        return ()
    _, authority, _, query, _ = parts
    values = []
    userinfo, at, _ = authority.rpartition("@")
    if at and ":" in userinfo:
        values.append(userinfo.partition(":")[2])
    values.extend(value for _, value in _secret_pairs(query[1:]))
    found: list[str] = []
    for value in values:
        for form in (value, unquote(value)):
            if form and form not in found:
                found.append(form)
    for pair in query[1:].split("&") if query else []:
        nested = _nested(pair.partition("=")[2])
        if nested is not None and nested != spec:
            found.extend(secret for secret in secrets_of(nested) if secret not in found)
    return tuple(found)


def public_spec(spec: str) -> str:
    """``spec`` without its secrets: the identity twice stores and shows (see the module doc).

    The password of ``scheme://user:password@host`` is removed (``user@host``), secret query
    parameters are dropped, and a URL given as a query value (``catalog_uri=``) loses its own
    password; the rest is kept as written. Idempotent, and a spec with no secret is returned
    unchanged.
    """
    parts = _split(spec) if isinstance(spec, str) else None
    if parts is None:
        return spec
    scheme, authority, path, query, fragment = parts
    userinfo, at, hostport = authority.rpartition("@")
    if at:
        user, colon, password = userinfo.partition(":")
        if colon and password:
            authority = f"{user}@{hostport}" if user else hostport
    pairs = query[1:].split("&") if query else []
    secret = {index for index, _ in _secret_pairs(query[1:])}
    kept = []
    for index, pair in enumerate(pairs):
        if index in secret:
            continue
        name, eq, value = pair.partition("=")
        nested = _nested(value)
        if nested is not None and secrets_of(nested):
            public = public_spec(nested)
            pair = f"{name}{eq}{public if nested == value else quote(public, safe='')}"
        kept.append(pair)
    if secret or kept != pairs:
        query = "?" + "&".join(kept) if kept else ""
    return f"{scheme}{authority}{path}{query}{fragment}"


def remember(spec: str) -> str:
    """Register ``spec``'s credentials under its public identity; return that identity.

    Later ``with_credentials(public)`` gives ``spec`` back (the last registration of one
    identity wins), and :func:`redact` masks its secrets wherever they appear.
    """
    public = public_spec(spec)
    if public != spec:
        names = _names_of(public)
        with _lock:
            _registered[public] = spec
            _secrets.update(secret for secret in secrets_of(spec) if secret not in names)
    return public


def _names_of(public: str) -> set[str]:
    """The user and database names a public spec shows (``etl`` and ``wh`` of
    ``postgresql://etl@db/wh#t``). A password equal to one of them is not masked in free text:
    the public spec shows it anyway, and masking it would hide which database or user a
    message is about (the development default ``twice:twice@.../twice``)."""
    parts = _split(public)
    if parts is None:
        return set()
    _, authority, path, _, _ = parts
    userinfo, at, _ = authority.rpartition("@")
    names = {unquote(userinfo.partition(":")[0])} if at else set()
    database = path.strip("/").split("/")[0] if path else ""
    return names | ({unquote(database)} if database else set())


def with_credentials(spec: str) -> str:
    """The spec to connect with: the registered spec behind a public identity, else ``spec``."""
    if not isinstance(spec, str):
        return spec
    with _lock:
        return _registered.get(spec, spec)


def redact_url(text: str) -> str:
    """``text`` with the passwords a URL's own form shows masked: ``user:***@host`` and
    ``password=***`` pairs (what :func:`redact` does without the registered passwords, for a
    URL twice shows as a name, whose user name may equal a registered password)."""
    if not isinstance(text, str) or not text:
        return text
    text = _URL_PASSWORD.sub(rf"\g<head>{MASK}@", text)
    return _PASSWORD_PAIR.sub(rf"\g<head>{MASK}", text)


def redact(text: str) -> str:
    """``text`` with every password it may hold replaced by ``***``: in URLs
    (``user:***@host``), in ``password=`` pairs, and every password registered here."""
    if not isinstance(text, str) or not text:
        return text
    text = redact_url(text)
    with _lock:
        known = sorted(_secrets, key=len, reverse=True)
    for secret in known:
        if _WORD.fullmatch(secret):  # "postgres": not inside "postgresql"
            text = re.sub(rf"(?<!\w){re.escape(secret)}(?!\w)", MASK, text)
        else:
            text = text.replace(secret, MASK)
    return text
