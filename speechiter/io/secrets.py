"""Secrets out of every message: passwords in URLs, signatures and tokens in query strings, the secret AWS
environment variables (:func:`redact`); speechiter/io/storage.py re-exports these names."""
from __future__ import annotations

import os
import re
from typing import Dict

__all__ = ["redact", "note_secrets"]

_USERINFO_RE = re.compile(r"(?<=://)[^/@\s]+@")
_PASSWORD_RE = re.compile(r"://[^/@:\s]*:([^/@\s]+)@")
# user:password@host as a library quotes it back without its scheme ('Invalid bucket name "user:pw@bucket"')
_BARE_USERINFO_RE = re.compile(r"[^\s/@:'\"()\[\]{}<>,;=]*:[^\s/@'\"]+@(?=[\w.-])")
_SECRET_PARAM_RE = re.compile(
    r"([?&;](?:[^=&\s#]*(?:sig|signature|token|key|credential|secret|password|auth)[^=&\s#]*)=)[^&\s#]*",
    re.IGNORECASE)
_SECRET_ENV = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN")


#: passwords seen in URLs in this process (``s3://user:password@...``), removed wherever they appear
_PASSWORDS: Dict[str, None] = {}


def note_secrets(text: str) -> None:
    """Remember the passwords of the URLs in ``text``: a library's message may quote one on its own."""
    for password in _PASSWORD_RE.findall(str(text)):
        if len(password) >= 4 and password not in _PASSWORDS:
            _PASSWORDS[password] = None


def redact(text: str) -> str:
    """``text`` without secrets: ``user:password@`` of URLs (also as a
    library quotes it, without the scheme), the passwords seen in URLs,
    query values named like signatures, tokens, keys or credentials, and the
    values of the secret AWS environment variables."""
    text = str(text)
    note_secrets(text)
    text = _BARE_USERINFO_RE.sub("***@", _USERINFO_RE.sub("***@", text))
    text = _SECRET_PARAM_RE.sub(r"\1***", text)
    secrets = [os.environ.get(name) for name in _SECRET_ENV] + list(_PASSWORDS)
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, "***")
    return text
