"""The Spark loader of jmsstore: a PySpark data source over store directories.

```python
from jmsstore_spark import register
register(spark)                          # once per session: format "jmsstore"
df = spark.read.format("jmsstore").option("view", "records").load("/data/stores/*")
messages = spark.read.format("jmsstore").option("view", "messages").load("/data/stores/*")
messages.write.format("jmsstore").mode("append").save("/data/new/store")   # import
```

Reports: :func:`jmsstore_spark.reports.reports`; the command line:
:mod:`jmsstore_spark.cli` (``jmsstore-spark export|import|report``).

Its own package: the core ``jmsstore`` wheel never depends on pyspark.
Importing the package does not import pyspark either (the names below are
loaded on first use), so ``jmsstore-spark`` checks its arguments before
paying for Spark.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jmsstore_spark.datasource import RECORDS_SCHEMA, JmsStoreDataSource, register

__all__ = ["RECORDS_SCHEMA", "JmsStoreDataSource", "register"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from jmsstore_spark import datasource

        return getattr(datasource, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
