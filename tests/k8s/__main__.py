"""``python -m tests.k8s``: see :mod:`tests.k8s.run`."""

from tests.k8s.run import main

raise SystemExit(main())
