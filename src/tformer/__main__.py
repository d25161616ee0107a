"""`python -m tformer` (and `torchrun -m tformer`) run the command line."""

import sys

from tformer.cli import main

sys.exit(main())
