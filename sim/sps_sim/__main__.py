import sys

from sps_sim.cli import main

sys.exit(main())
