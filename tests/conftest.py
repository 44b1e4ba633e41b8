import os
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
