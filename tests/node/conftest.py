"""Fixtures of the tests on the node: the test-server image and the operator deployed there.

``node_cluster`` and ``operator_image`` are suite-wide plugins (``tests/node/cluster.py``,
``tests/image/fixtures.py``, registered by ``tests/conftest.py``).
"""

from __future__ import annotations

import pytest

from testbed.node import NodeCluster
from testbed.node.images import HTTP_SERVER_IMAGE, http_server_archive
from tests.node.fixtures import (  # noqa: F401 - fixtures of the operator-on-the-node tests
    pod_overlay,
    pod_tenant,
    sentinels,
    stack_overlay,
    state,
    tenant,
)


@pytest.fixture(scope="session")
def http_server_image(node_cluster: NodeCluster, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The test-server image (``testbed/node/testserver``), imported into the node."""
    archive = http_server_archive(tmp_path_factory.mktemp("images") / "test-server.tar")
    node_cluster.load_image(archive, HTTP_SERVER_IMAGE)
    return HTTP_SERVER_IMAGE
