"""jmsstore benchmarks: ``jmsstore-bench <suite> [--quick] [--out DIR]`` (``python -m jmsstore.bench``).

Every figure that is compared against a goal is a *ratio* of two
measurements taken in the same run on the same file system (ours against
the raw disk limit, against sqlite3, against codec "none", ...), because the
absolute numbers on a shared machine are noisy.

Layout (meant to grow into the full harness of issue 7):

- ``harness``  -- run context: progress lines, tables, goals, the JSON report;
- ``machine``  -- the machine description written into every report;
- ``bodies``   -- generated message bodies (JSON-like, XML-like, random);
- ``peers``    -- what we compare against: the raw disk limit, sqlite3 as a
  queue, the native-thread engine load generator;
- ``store``    -- the store suite of issue 2 (put throughput, recovery, codecs);
- ``pager``    -- the pager suite (memory per message, paged drain, sorted orders);
- ``broker``   -- the broker suite (send+receive throughput vs sqlite3 and persist-queue,
  process CPU per message against the engine floor of ``floor``).

Suites register themselves in ``SUITES`` (see ``__main__``).
"""
