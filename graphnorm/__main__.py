"""``python -m graphnorm ...``: the same command line as the ``graphnorm`` script."""

import sys

from graphnorm.cli import main

sys.exit(main())
