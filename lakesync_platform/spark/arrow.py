"""A DataFrame's rows collected to the driver as one Arrow table, on either kind of session.

Both kinds of session move results to Python as Arrow; neither pyspark 3.5 API that hands the
Arrow over is public. A classic session collects through ``_collect_as_arrow`` (what
``toPandas`` uses); a Spark Connect session receives Arrow batches from the server, which its
``collect`` turns into rows — :func:`collect_arrow` keeps them as Arrow instead (the client's
``to_table``, what Connect's ``collect`` and ``toPandas`` use). pyspark 4's public
``DataFrame.toArrow`` is taken where it exists. Either way the whole result is collected once,
as before: bound it (``limit``) where it may be large.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["collect_arrow", "is_connect"]


def is_connect(handle: SparkSession | DataFrame) -> bool:
    """Whether a session (or a DataFrame of one) is a Spark Connect client."""
    return type(handle).__module__.startswith("pyspark.sql.connect")


def collect_arrow(df: DataFrame) -> pa.Table:
    """``df``'s rows as one Arrow table (an empty frame keeps its column names)."""
    import pyarrow as pa

    frame: Any = df
    if hasattr(frame, "toArrow"):  # pyspark 4
        return frame.toArrow()
    if is_connect(df):
        client = frame._session.client
        table, _ = client.to_table(frame._plan.to_proto(client))
        return table
    batches = frame._collect_as_arrow(split_batches=True)
    if not batches:
        return pa.table({name: pa.array([], pa.null()) for name in df.columns})
    return pa.Table.from_batches(batches)
