"""Secrets out of URLs: what may be printed, logged or written to JSON instead."""
from __future__ import annotations

from urllib.parse import parse_qsl, urlsplit

SECRET_PARAMS = ("password", "pass", "auth")


def redact_url(url: str) -> str:
    """``url`` with any password replaced by ``***`` (userinfo and ``?password=``)."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, host = netloc.rsplit("@", 1)
        user = userinfo.split(":", 1)[0] if ":" in userinfo else ""  # a lone userinfo is the password
        netloc = f"{user}:***@{host}"
    query = "&".join(f"{k}=***" if k.lower() in SECRET_PARAMS else f"{k}={v}"
                     for k, v in parse_qsl(parts.query, keep_blank_values=True))
    slashes = "//" if url.startswith(f"{parts.scheme}://") else ""  # unix:///path has an empty host
    return (f"{parts.scheme}:{slashes}{netloc}{parts.path}" + (f"?{query}" if query else "")
            + (f"#{parts.fragment}" if parts.fragment else ""))


def url_secrets(url: str) -> list[str]:
    """The secret parts of ``url`` (to scrub from error texts that may quote them)."""
    parts = urlsplit(url)
    found = [parts.password] if parts.password else []
    found += [v for k, v in parse_qsl(parts.query) if k.lower() in SECRET_PARAMS and v]
    if parts.username and not parts.password and "@" in parts.netloc:
        found.append(parts.username)  # redis://secret@host: the lone userinfo is the password
    return found


__all__ = ["redact_url", "url_secrets"]
