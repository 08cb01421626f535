import sys

from jmsstore.cli import main

sys.exit(main())
