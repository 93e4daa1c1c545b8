"""The Ray cluster of tests/cluster: a head and one added node on this machine
(ray.cluster_utils.Cluster), each with one CPU and one ``trial_slot``.

A module the tests import the ``cluster`` fixture from, not a conftest.py:
tests/cluster is on sys.path (its tests import trialfn by name), and a
conftest.py there would shadow tests/conftest.py for every other module
that imports from ``conftest``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
NODE = dict(num_cpus=1, resources={"trial_slot": 1}, object_store_memory=100 * 2**20)


@pytest.fixture
def cluster():
    # The workers import trialfn by name: the nodes' processes inherit this path.
    path = [str(HERE), os.environ.get("PYTHONPATH", "")]
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in path if p)
    import ray
    from ray.cluster_utils import Cluster

    c = Cluster(initialize_head=True, head_node_args=dict(NODE))
    c.add_node(**NODE)
    c.wait_for_nodes()
    try:
        yield c
    finally:
        if ray.is_initialized():
            ray.shutdown()
        c.shutdown()
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old


