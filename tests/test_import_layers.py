"""lint/import_layers.py (run by `make lint`) on a small made-up kcoord tree:
it reports an arrow pointing up, a pipeline import outside its pieces and a
cycle of top-level imports, and passes a tree that has none."""
from __future__ import annotations

from pathlib import Path

from tests.support import load_script

layers = load_script(Path(__file__).resolve().parents[1] / "lint" / "import_layers.py",
                     "import_layers")


def tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in {"__init__.py": "", "protocol/__init__.py": "", "log/__init__.py": "",
                       "server/__init__.py": "", "pipeline/__init__.py": "",
                       "coordinator/__init__.py": "", **files}.items():
        path = root / "kcoord" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root / "kcoord"


def test_a_clean_tree_passes(tmp_path, capsys):
    root = tree(tmp_path, {"log/a.py": "from ..protocol import x\n",
                           "server/b.py": "from ..log import a\n",
                           "pipeline/c.py": "from ..coordinator.partitioner import p\n",
                           "coordinator/partitioner.py": ""})
    assert layers.main(["", str(root)]) == 0
    assert capsys.readouterr().out == ""


def test_up_arrows_pipeline_reach_and_cycles_fail(tmp_path, capsys):
    root = tree(tmp_path, {"log/a.py": "def f():\n    from ..server import b\n",
                           "server/b.py": "",
                           "pipeline/c.py": "from ..coordinator import shard\n",
                           "coordinator/shard.py": "",
                           "protocol/x.py": "from . import y\n",
                           "protocol/y.py": "from . import x\n"})
    assert layers.main(["", str(root)]) == 1
    out = capsys.readouterr().out
    assert "log (layer 1) imports kcoord.server.b (layer 5)" in out
    assert "pipeline imports kcoord.coordinator.shard" in out
    assert "import cycle (top-level imports): kcoord.protocol.x -> kcoord.protocol.y" in out
