"""`python -m backend <command>`: the CLI lives in the backend/cli package."""

import sys

from backend.cli import main

sys.exit(main())
