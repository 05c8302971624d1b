"""``python -m acl_mem`` is ``acl-mem``."""

import sys

from .cli import main

sys.exit(main())
