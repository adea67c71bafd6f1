"""The one logging set-up of every process (the graph server, ``python -m atfgraph.worker``,
``pyworkflow worker`` and ``sweeper``): level names, text or JSON lines, and no secret in any line.

A record's structured fields (``extra={"run_id": ..., "wait_id": ..., "attempt": ...}``) are
keys of the JSON object, and ``key=value`` after the message in text. Every line, whatever logged
it, passes through :func:`redact` last: bearer tokens (``atfg_<id>_<secret>``), pyworkflow hook
tokens and the password of a database URL never reach the output.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from typing import IO, Any

import orjson

#: The formats ``--log-format`` takes.
LOG_FORMATS = ("text", "json")

# atfgraph bearer tokens: the public id stays (it names the token in the audit trail).
_BEARER = re.compile(r"\b(atfg_[0-9a-f]{16}_)[A-Za-z0-9_-]{8,}")
# pyworkflow hook tokens (pyworkflow._ids.new_token) and a bearer header's value.
_HOOK_TOKEN = re.compile(r"\b(pwh_)[A-Za-z0-9_-]{8,}")
_AUTH_HEADER = re.compile(r"(?i)(bearer\s+)[^\s\"',]+")
# user:password@ in a URL.
_URL_PASSWORD = re.compile(r"(://[^:/@\s]*:)[^@\s]*@")


def redact(text: str) -> str:
    """``text`` with every credential it holds replaced by ``***``."""
    if "atfg_" in text:
        text = _BEARER.sub(r"\1***", text)
    if "pwh_" in text:
        text = _HOOK_TOKEN.sub(r"\1***", text)
    if "://" in text:
        text = _URL_PASSWORD.sub(r"\1***@", text)
    return _AUTH_HEADER.sub(r"\1***", text) if "earer" in text else text


#: The attributes every LogRecord has: anything else on a record is a structured field (but
#: uvicorn's copy of its message with terminal colours).
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
    "color_message",
}


def fields(record: logging.LogRecord) -> dict[str, Any]:
    """The structured fields of ``record`` (what ``extra=`` added)."""
    return {k: v for k, v in vars(record).items() if k not in _STANDARD and not k.startswith("_")}


class TextFormatter(logging.Formatter):
    """``time LEVEL logger: message key=value ...``, redacted."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        extra = fields(record)
        if extra:
            line += " " + " ".join(f"{k}={v}" for k, v in extra.items())
        return redact(line)


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``ts``, ``level``, ``logger``, ``message``, the structured
    fields, and ``exception`` with the traceback when there is one; redacted."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": round(record.created, 6),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        entry.update(fields(record))
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return redact(orjson.dumps(entry, default=str).decode())


def log_format(value: str | None, env: str = "ATFGRAPH_LOG_FORMAT") -> str:
    """The format a flag names, else the environment's ``env``, else ``text``; ``ValueError``
    for anything but :data:`LOG_FORMATS`."""
    chosen = (value or os.environ.get(env) or "text").strip().lower()
    if chosen not in LOG_FORMATS:
        raise ValueError(f"log format must be 'text' or 'json', not {chosen!r}")
    return chosen


def log_level(value: str) -> int:
    """A level name (``debug``, ``info``, ``warning``, ``error``, ``critical``, any case) as a
    number; ``ValueError`` for anything else."""
    level = logging.getLevelName(value.strip().upper())
    if not isinstance(level, int):
        raise ValueError(f"log level must be debug, info, warning, error or critical, not {value!r}")
    return level


def setup_logging(level: str = "warning", fmt: str = "text", *, stream: IO[str] | None = None) -> None:
    """Send every logger's records at ``level`` and above to ``stream`` (stderr) as ``fmt``
    (``text`` or ``json``), replacing whatever handlers the root logger had."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format(fmt) == "json" else TextFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(log_level(level))


__all__ = [
    "LOG_FORMATS",
    "JsonFormatter",
    "TextFormatter",
    "log_format",
    "log_level",
    "redact",
    "setup_logging",
]
