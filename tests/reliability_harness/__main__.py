"""``python -m tests.reliability_harness``: see :mod:`tests.reliability_harness.run`."""

import sys

from tests.reliability_harness.run import main

sys.exit(main())
