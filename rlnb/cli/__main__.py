"""``python -m rlnb.cli ...``: the ``rlnb`` command."""

import sys

from rlnb.cli import main

sys.exit(main())
