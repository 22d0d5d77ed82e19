"""`python -m yatt.cli VERB ...`, the same as the `yatt` command."""
import sys

from .main import main

sys.exit(main())
