"""``python -m acl_mem.pyacl [--force] [--backend NAME] script.py [args...]``: run a pyACL
program unchanged, with ``import acl`` giving acl_mem.pyacl (``acl-mem run`` does the same).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from ._install import RUN_DESCRIPTION, RUN_EPILOG, add_run_arguments, run_script


def main(argv: Sequence[str] | None = None, prog: str = "python -m acl_mem.pyacl") -> int:
    parser = argparse.ArgumentParser(prog=prog, description=RUN_DESCRIPTION, epilog=RUN_EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_arguments(parser)
    args = parser.parse_args(argv)
    return run_script(args.script, args.args, prog=prog, force=args.force,
                      backend=args.backend)


if __name__ == "__main__":
    sys.exit(main())
