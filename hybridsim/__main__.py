import sys

from hybridsim.cli import main

sys.exit(main())
