"""``python -m fedsim.cli``: the same command as ``fedsim``."""

from fedsim.cli import main

raise SystemExit(main())
