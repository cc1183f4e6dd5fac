"""The Slurm tests' cluster: one per pytest worker, started once (it takes about a second)."""

from __future__ import annotations

import pytest

from tests.helpers.slurm import SlurmCluster, unavailable


@pytest.fixture(scope="session")
def slurm():
    """A running one-node Slurm cluster; the tests are skipped, with the reason, when Slurm
    cannot be started here."""
    reason = unavailable()
    if reason:
        pytest.skip(reason)
    cluster = SlurmCluster().start()
    yield cluster
    cluster.stop()
