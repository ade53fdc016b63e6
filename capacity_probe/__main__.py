"""``python -m capacity_probe``: see capacity_probe.cli."""

from capacity_probe.cli import main

raise SystemExit(main())
