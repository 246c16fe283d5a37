"""``python -m hyde_lc.cli``: the ``hyde-lc`` command."""

import sys

from hyde_lc.cli import main

sys.exit(main())
