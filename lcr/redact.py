"""Secrets out of URLs: what may be printed, logged or written to JSON instead.

Credentials are everything between ``scheme://`` and the last ``@`` of the URL, not
what ``urlsplit`` calls userinfo: a password typed in unencoded may hold ``/``, ``?``
or ``#``, which would end ``urlsplit``'s authority early and leave the rest of the
password in the path, query or fragment. (A URL with an ``@`` in its path or query is
therefore shown with that part hidden too: shown too little, never too much.)
"""
from __future__ import annotations

from urllib.parse import parse_qsl, unquote, urlsplit

SECRET_PARAMS = ("password", "pass", "auth")


def split_credentials(url: str) -> tuple[str | None, str]:
    """``(credentials, url without them)``; credentials None when the URL has none."""
    scheme, sep, rest = url.partition("://")
    if not sep or "@" not in rest:
        return None, url
    credentials, _, host_and_rest = rest.rpartition("@")
    return credentials, f"{scheme}://{host_and_rest}"


def _password(credentials: str) -> str:
    """The secret part of ``user:password`` (a lone value is the password: redis://secret@host)."""
    return credentials.split(":", 1)[1] if ":" in credentials else credentials


def redact_url(url: str) -> str:
    """``url`` with any password replaced by ``***`` (credentials and ``?password=``)."""
    credentials, url = split_credentials(url)
    parts = urlsplit(url)
    netloc = parts.netloc
    if credentials is not None:
        user = credentials.split(":", 1)[0] if ":" in credentials else ""
        netloc = f"{user}:***@{netloc}"
    query = "&".join(f"{k}=***" if k.lower() in SECRET_PARAMS else f"{k}={v}"
                     for k, v in parse_qsl(parts.query, keep_blank_values=True))
    slashes = "//" if url.startswith(f"{parts.scheme}://") else ""  # unix:///path has an empty host
    scheme = f"{parts.scheme}:" if parts.scheme else ""  # a bare name ("host") is no URL: as given
    return (f"{scheme}{slashes}{netloc}{parts.path}" + (f"?{query}" if query else "")
            + (f"#{parts.fragment}" if parts.fragment else ""))


def url_secrets(url: str) -> list[str]:
    """The secret parts of ``url``, as written and percent-decoded (to scrub from error
    texts that may quote them)."""
    credentials, url = split_credentials(url)
    found = [_password(credentials)] if credentials else []
    found += [v for k, v in parse_qsl(urlsplit(url).query) if k.lower() in SECRET_PARAMS and v]
    found += [unquote(secret) for secret in found if unquote(secret) != secret]
    return [secret for secret in found if secret]


__all__ = ["redact_url", "split_credentials", "url_secrets"]
