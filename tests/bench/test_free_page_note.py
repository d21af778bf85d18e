"""bench produce_fetch says whether the VM hands free memory back to its host
(virtio-balloon free page reporting), read from the device's feature bits."""
from bench.produce_fetch import free_page_note, free_page_reporting


def device(root, name, kind, features):
    d = root / name
    d.mkdir()
    (d / "device").write_text(kind + "\n")
    (d / "features").write_text(features + "\n")


def test_reporting_is_feature_bit_5_of_the_balloon(tmp_path):
    device(tmp_path, "virtio0", "0x0002", "1" * 64)          # a block device: not asked
    assert free_page_reporting(tmp_path) is None
    device(tmp_path, "virtio1", "0x0005", "0110010" + "0" * 57)
    assert free_page_reporting(tmp_path) is True
    (tmp_path / "virtio1" / "features").write_text("0110000" + "0" * 57 + "\n")
    assert free_page_reporting(tmp_path) is False


def test_the_note_names_what_was_found(monkeypatch):
    import bench.produce_fetch as pf
    for found, words in ((True, "reports free pages"), (False, "does not report"),
                         (None, "unknown")):
        monkeypatch.setattr(pf, "free_page_reporting", lambda found=found: found)
        assert words in free_page_note()
