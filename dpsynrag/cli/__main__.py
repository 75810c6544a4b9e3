"""``python -m dpsynrag.cli``: the ``dpsynrag`` command."""

import sys

from dpsynrag.cli.app import main

sys.exit(main())
