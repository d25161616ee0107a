import pytest
from catalogue import World, build_world


@pytest.fixture(scope="session")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    """The catalogue's tiny recipes, checkpoints and Hugging Face directory, built once (cases copy before breaking)."""
    return build_world(tmp_path_factory.mktemp("world"))
