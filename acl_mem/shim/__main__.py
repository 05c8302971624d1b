"""``python -m acl_mem.shim``: the same as ``acl-mem shim``."""

import sys

from ._cli import main

sys.exit(main())
