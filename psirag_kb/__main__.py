"""`python -m psirag_kb` runs the command line."""

import sys

from psirag_kb.cli import main

sys.exit(main())
