"""``python -m bench <suite> ...`` from a checkout, as before the harness moved into the wheel.

The benchmark harness is :mod:`jmsstore.bench` (installed with jmsstore; the
``jmsstore-bench`` command). This shim only forwards to it.
"""

from __future__ import annotations

import sys

from jmsstore.bench.__main__ import main

if __name__ == "__main__":
    sys.exit(main())
