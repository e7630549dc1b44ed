import sys

from sps_release.cli import main

sys.exit(main())
