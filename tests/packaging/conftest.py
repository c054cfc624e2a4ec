"""The chart's tests render with the real helm: the binary, and the chart's variants rendered
once a session for every module here."""

from __future__ import annotations

import pytest

from tests.packaging import chart_render as cr
from tests.packaging.chart_variants import VARIANTS
from tests.packaging.paths import helm_binary


@pytest.fixture(scope="session")
def helm() -> str:
    found = helm_binary()
    if found is None:
        pytest.skip("helm is not installed (make deps-tools puts it in .tools/bin)")
    return found


@pytest.fixture(scope="session")
def rendered(helm: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, cr.Rendered]:
    """:data:`~tests.packaging.chart_variants.VARIANTS`, name -> its manifests."""
    tmp = tmp_path_factory.mktemp("values")
    return {name: cr.template(helm, tmp, values, namespace=ns)
            for name, (values, ns) in VARIANTS.items()}
