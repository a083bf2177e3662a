"""`python -m backend <command>`: the CLI lives in backend/cli.py."""

import sys

from backend.cli import main

sys.exit(main())
