"""`python -m grader.cli`: the `gagar` command."""

import sys

from grader.cli.commands import main

if __name__ == "__main__":
    sys.exit(main())
