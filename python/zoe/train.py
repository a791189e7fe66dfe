"""``python -m zoe.train [zoe-train's options]``: zoe-train itself, the binary this package was
built with (zoe/bin/zoe-train), run in place of this interpreter so that mpirun, signals and the
exit code are zoe-train's::

    mpirun -np 2 python -m zoe.train --model demo --data corpus.txt --steps 50
"""
from __future__ import annotations

import os
import sys


def executable() -> str:
    """The path of the package's zoe-train."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "zoe-train")


def main(argv: list[str] | None = None) -> None:
    path = executable()
    args = sys.argv[1:] if argv is None else argv
    if not os.access(path, os.X_OK):
        sys.exit(f"zoe.train: {path} is missing (a broken install of the zoe package)")
    sys.stdout.flush()
    os.execv(path, ["zoe-train", *args])


if __name__ == "__main__":
    main()
