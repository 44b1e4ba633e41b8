from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


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
