import sys

from sps_operator.sim.cli import main

sys.exit(main())
