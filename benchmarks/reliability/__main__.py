"""``python -m benchmarks.reliability``: see :mod:`benchmarks.reliability.run`."""

import sys

from benchmarks.reliability.run import main

sys.exit(main())
