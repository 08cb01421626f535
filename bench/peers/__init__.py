"""What the store is compared against, measured in the same run.

- ``raw_disk``: the disk's limit for the store's write pattern (one pwrite +
  one fdatasync per batch into a pre-written file), via the native hook;
- ``sqlite_queue``: sqlite3 used as a queue (WAL, synchronous=FULL);
- ``engine``: the Rust example ``put_load`` (native threads, no Python);
- ``persist_queue``: persist-queue's SQLite and file queues (broker suite).
"""
