"""``python -m spate.cli``: the same as the ``spate`` console script."""

import sys

from spate.cli._main import main

sys.exit(main())
