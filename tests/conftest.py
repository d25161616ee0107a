from collections.abc import Iterator

import pytest
import torch


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


@pytest.fixture
def one_thread() -> Iterator[None]:
    """Tiny models on one thread: handing products this small to a second thread costs more than it saves
    (tens of times more on a busy machine); what they compute does not change."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
