"""`python -m parity`: the same as the `parity` console script."""
from parity.cli import main

raise SystemExit(main())
