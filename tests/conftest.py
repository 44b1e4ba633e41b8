import os
import sys
from pathlib import Path

import pytest

from p2pfed.scenario.threads import WORKER_THREADS_ENV

ROOT = Path(__file__).resolve().parents[1]

# One PyTorch thread per test process, and in every process a test starts: the tests run one
# process per core (pytest-xdist), and tiny models gain nothing from more threads while OpenMP's
# waiting threads, on cores another process is using, slow each run many times over. Set before
# torch is imported; the runtimes read it as a sweep worker's thread count (results do not depend
# on it). A contact run then starts no offload helper unless the test asks for one.
os.environ.setdefault(WORKER_THREADS_ENV, "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
# Where a test asks for two threads, OpenMP's idle threads sleep rather than spin: the spinning
# takes CPU from the other test processes on this machine and changes no result.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# The test processes keep compiled bytecode even where the environment says not to
# (PYTHONDONTWRITEBYTECODE): each pytest-xdist worker and each process a test starts would
# otherwise compile p2pfed, and rewrite every test module's asserts, anew.
if os.environ.pop("PYTHONDONTWRITEBYTECODE", None) is not None:
    sys.dont_write_bytecode = False


@pytest.fixture
def repo_root() -> Path:
    return ROOT


@pytest.fixture
def one_torch_thread():
    """Tiny models train fastest on one thread (as the runtimes set it)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def permitted() -> None:
    """Skip, with the reason, where network namespaces cannot be built (no root)."""
    from p2pfed.network.lan import LanError, check_permitted

    try:
        check_permitted()
    except LanError as exc:
        pytest.skip(f"namespaces not permitted here: {exc}")


# Test files whose tests run one after another on one pytest-xdist worker: those that build network
# namespaces (the kernel hands a freed namespace's id to the next one built, so a LAN built beside
# another would count the other's namespaces as left behind), and those whose tests share one
# expensive module fixture (built once, not once per worker). Every other test goes to whichever
# worker is free. (pytest-xdist's own ``xdist_group`` mark is lost under pytest 9.)
SHARED_WORKER = {"test_emulated_faults.py": "namespaces", "test_emulated_lan.py": "namespaces",
                 "test_emulated_hosts.py": "namespaces",
                 "test_peer_netns.py": "namespaces", "test_peer_contacts.py": "namespaces",
                 "test_sweep.py": "sweep", "test_energy.py": "energy", "test_data_wisdm.py": "wisdm",
                 "test_fedsub_science.py": "fedsub-science", "test_sharded_dask.py": "sharded",
                 # the method and attack contracts start two helper processes (hash seeds) in each worker
                 # they run on
                 "test_method_contract.py": "contract", "test_user_attacks.py": "contract",
                 "test_adaptive_attacks.py": "contract"}
# Test files with tests that take many seconds each (they start processes or wait on real time):
# their tests are handed out first, so that the short tests fill the gaps instead of a long test
# starting last and running alone.
START_FIRST = ("test_peer_processes.py", "test_transport_inproc.py", "test_readme.py", "test_examples.py",
               "test_peer_hosts.py", "test_offload.py", "test_docs_pages.py", "test_stratified_split.py",
               "test_peer_security.py", "test_wire_precision.py")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The long tests of ``START_FIRST`` first (pytest-xdist hands out tests in this order, after
    the groups of ``SHARED_WORKER``, largest first)."""
    items.sort(key=lambda item: item.path.name not in START_FIRST)


def pytest_configure(config: pytest.Config) -> None:
    """Before pytest-xdist starts its workers (in the process that starts them), the test modules'
    assert-rewritten bytecode, so that a fresh checkout's workers do not each write it."""
    if not hasattr(config, "workerinput") and config.getoption("numprocesses", None):
        from tests.rewritten_bytecode import write_rewritten_bytecode

        write_rewritten_bytecode(config, ROOT / "tests")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """One worker per core for ``-n auto``. A second worker per core, meant to keep a core busy
    while a test waits on real time, cost more than it gained once the tests that wait long had
    moved to the slow set: two processes on one core slow each other's every test."""
    return len(os.sched_getaffinity(0))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    from xdist.scheduler import LoadScopeScheduling

    class SharedWorkerScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return SHARED_WORKER.get(Path(nodeid.split("::")[0]).name, nodeid)

    return SharedWorkerScheduling(config, log)

