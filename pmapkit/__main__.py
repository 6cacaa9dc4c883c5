"""``python -m pmapkit [demo | bench ...]``: the same as the ``pmapkit`` command."""
import sys

from pmapkit.tools.cli import main

sys.exit(main())
