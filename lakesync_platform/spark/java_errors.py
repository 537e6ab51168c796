"""Failures of Spark and Iceberg as one line an operator can read (no Java stack trace).

pyspark turns the JVM's analysis and parse errors into ``pyspark.errors`` exceptions whose
message starts with ``[ERROR_CLASS] what went wrong`` and may go on with the query plan; on a
classic session py4j raises ``Py4JJavaError`` for anything else, whose Java exception names its
class before the message. A Spark Connect client raises the ``pyspark.errors`` classes too
(their ``pyspark.errors.exceptions.connect`` subclasses), with the server's message as text and
— in 3.5 — without the error class or its parameters as fields. :func:`one_line` keeps the
first line of the message that matters; :func:`error_class` and :func:`message_parameter` read
what the exception carries, else what its text says.
"""

from __future__ import annotations

import re

__all__ = ["error_class", "message_parameter", "one_line"]

_CLASS = re.compile(r"\[([A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*)\]")
_RELATION = re.compile(r"The table or view (`(?:[^`]|``)+`(?:\.`(?:[^`]|``)+`)*) cannot be found")


def error_class(exc: BaseException) -> str | None:
    """The error class of a Spark error (``TABLE_OR_VIEW_NOT_FOUND``), or ``None``."""
    getter = getattr(exc, "getErrorClass", None)
    found = getter() if callable(getter) else None
    if found:
        return str(found)
    match = _CLASS.search(str(getattr(exc, "desc", None) or exc))
    return None if match is None else match.group(1)


def message_parameter(exc: BaseException, name: str) -> str | None:
    """One parameter of a Spark error's message (``relationName``), from the exception where it
    carries them (a classic session), else from its message text (Spark Connect 3.5; only the
    parameters read here: ``relationName`` of ``TABLE_OR_VIEW_NOT_FOUND``)."""
    getter = getattr(exc, "getMessageParameters", None)
    params = getter() if callable(getter) else None
    if params and name in params:
        return str(params[name])
    if name == "relationName" and error_class(exc) == "TABLE_OR_VIEW_NOT_FOUND":
        match = _RELATION.search(str(getattr(exc, "desc", None) or exc))
        return None if match is None else match.group(1)
    return None


_MAX = 500


def one_line(exc: BaseException) -> str:
    """The first line of what ``exc`` says, without the Java class's package or a stack."""
    java = getattr(exc, "java_exception", None)
    if java is not None:  # Py4JJavaError: the Java exception's own message
        text = str(java.getMessage() or java.toString())
        cause = java.getCause()
        while not text.strip() and cause is not None:
            text, cause = str(cause.getMessage() or cause.toString()), cause.getCause()
    else:
        text = str(getattr(exc, "desc", None) or exc)  # pyspark's CapturedException: desc
    first = next((line.strip() for line in text.splitlines() if line.strip()), type(exc).__name__)
    return first if len(first) <= _MAX else first[: _MAX - 1] + "…"
