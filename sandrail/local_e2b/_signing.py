"""Signed file URLs, checked as envd checks them.

``Sandbox.download_url`` / ``upload_url`` sign ``path:operation:user:token``
(and ``:expiration`` when the URL expires) with SHA-256, the access token
being the sandbox's secret; the URL carries ``signature=v1_<base64>`` and
``signature_expiration=<unix seconds>`` instead of the token header.

Strategy: on E2B the URL's host names the sandbox; here every sandbox shares
one address and a signed URL has no ``E2b-Sandbox-Id`` header, so the
signature itself names the sandbox: it is valid for exactly the one whose
token made it (:func:`signed_by`).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from collections.abc import Iterable, Mapping
from typing import TypeVar

__all__ = ["SignatureError", "check", "signature", "signed_by"]

T = TypeVar("T")


class SignatureError(Exception):
    """A file request refused (401): envd's words in the message."""


def signature(path: str, operation: str, user: str, token: str, expiration: int | None) -> str:
    """envd's ``v1_`` signature of a file URL."""
    raw = f"{path}:{operation}:{user}:{token}"
    if expiration is not None:
        raw += f":{expiration}"
    digest = hashlib.sha256(raw.encode("utf-8")).digest()
    return "v1_" + base64.b64encode(digest).rstrip(b"=").decode("ascii")


def _expiration(params: Mapping[str, str]) -> int | None:
    raw = params.get("signature_expiration")
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        raise SignatureError("invalid signature") from None


def _valid(params: Mapping[str, str], operation: str, token: str) -> bool:
    given = params.get("signature")
    if given is None:
        return False
    wanted = signature(
        params.get("path", ""), operation, params.get("username", ""), token, _expiration(params)
    )
    return hmac.compare_digest(wanted.encode(), given.encode())


def check(params: Mapping[str, str], operation: str, token: str, header: str | None) -> None:
    """Authorize a ``/files`` request (``operation`` ``"read"`` or
    ``"write"``) as envd does: the access token header if sent, else a
    valid, unexpired signature. Raises :class:`SignatureError`."""
    if header:
        if not hmac.compare_digest(header.encode(), token.encode()):
            raise SignatureError("access token present in header but does not match")
        return
    if params.get("signature") is None:
        raise SignatureError("missing signature query parameter")
    if not _valid(params, operation, token):
        raise SignatureError("invalid signature")
    expiration = _expiration(params)
    if expiration is not None and expiration < time.time():
        raise SignatureError("signature is already expired")


def signed_by(
    params: Mapping[str, str], operation: str, candidates: Iterable[tuple[str, T]]
) -> T | None:
    """Of ``(token, item)`` pairs, the item whose token made the request's
    signature, or ``None``."""
    for token, item in candidates:
        try:
            if _valid(params, operation, token):
                return item
        except SignatureError:
            return None
    return None
