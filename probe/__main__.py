"""``python -m probe``: see probe.cli."""

from probe.cli import main

raise SystemExit(main())
