"""``python -m tests.e2e``: see :mod:`tests.e2e.run`."""

from tests.e2e.run import main

raise SystemExit(main())
