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
"""

from jmsstore_spark.datasource import RECORDS_SCHEMA, JmsStoreDataSource, register

__all__ = ["RECORDS_SCHEMA", "JmsStoreDataSource", "register"]
