"""``not CMD...``: run CMD and invert its exit status (as LLVM's ``not``), for lit tests."""

import subprocess
import sys


def main() -> int:
    rc = subprocess.call(sys.argv[1:])
    return 0 if rc != 0 else 1


if __name__ == "__main__":
    sys.exit(main())
