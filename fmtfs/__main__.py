import sys

from fmtfs.cli import main

sys.exit(main())
