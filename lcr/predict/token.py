"""The predictor service's bearer token, for the client and the service alike.

Where it comes from, first match wins: the ``token`` given, else the file
``token_file`` (its content, stripped), else the environment variable
``LCR_PREDICTOR_TOKEN``; none of them: no token. A token never needs to be on a command
line, where every local user can read it in ``ps``.

A token that is given but empty (or only whitespace) is a configuration error, not "no
token": a service started so would refuse every client, and a client so would send no
header and be refused. So is one with characters other than printable ASCII or with
spaces (a line break would end the HTTP header early; ``Bearer`` takes one word). Each error is one line naming where the token came from.
"""
from __future__ import annotations

import os

from lcr.errors import LcrInputError

TOKEN_ENV = "LCR_PREDICTOR_TOKEN"


def resolve_token(token: "str | None" = None, token_file: "str | os.PathLike | None" = None,
                  env: str = TOKEN_ENV) -> "str | None":
    """The token to use, checked (see the module's docstring)."""
    if token is not None and token_file is not None:
        raise LcrInputError("give token or token_file, not both")
    if token is not None:
        return check_token(token, "token")
    if token_file is not None:
        return check_token(read_token_file(token_file), f"token file {os.fspath(token_file)}")
    if env in os.environ:
        return check_token(os.environ[env], f"${env}")
    return None


def read_token_file(path: "str | os.PathLike", name: str = "token file") -> str:
    """The file's text; ``name`` is how errors call the file's source (e.g. a flag)."""
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read(1 << 16)
    except (OSError, UnicodeDecodeError) as err:
        reason = err.strerror if isinstance(err, OSError) and err.strerror else type(err).__name__
        raise LcrInputError(f"{name} {os.fspath(path)}: cannot read it ({reason})") from None


def check_token(token, source: str) -> str:
    """``token`` stripped; ``LcrInputError`` if it is not a usable token."""
    if not isinstance(token, str):
        raise LcrInputError(f"{source} must be a string, got {type(token).__name__}")
    token = token.strip()
    if not token:
        raise LcrInputError(f"{source}: token is empty (pass None, or nothing, for a service without a token)")
    if not all("!" <= c <= "~" for c in token):  # one word of printable ASCII in an HTTP header
        raise LcrInputError(f"{source}: token must be printable ASCII without spaces (it travels in "
                            "an HTTP header)")
    return token


__all__ = ["TOKEN_ENV", "check_token", "read_token_file", "resolve_token"]
