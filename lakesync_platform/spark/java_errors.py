"""Failures of Spark and Iceberg as one line an operator can read (no Java stack trace).

pyspark turns the JVM's analysis and parse errors into ``pyspark.errors`` exceptions whose
message starts with ``[ERROR_CLASS] what went wrong`` and may go on with the query plan; py4j
raises ``Py4JJavaError`` for anything else, whose Java exception names its class before the
message. :func:`one_line` keeps the first line of the message that matters.
"""

from __future__ import annotations

__all__ = ["one_line"]

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
