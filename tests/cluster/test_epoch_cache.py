"""The leader-epoch cache: Kafka's LeaderEpochFileCache rules."""
import pytest

from kcoord.log.leader_epoch import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET, EpochCache

UNDEFINED = (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)


def test_end_offset_for_follows_kafkas_rules():
    cache = EpochCache([(1, 0), (3, 10), (5, 20)])
    assert cache.end_offset_for(5, 25) == (5, 25)         # latest epoch: the log end
    assert cache.end_offset_for(3, 25) == (3, 20)         # ends where the next starts
    assert cache.end_offset_for(4, 25) == (3, 20)         # unknown epoch: the one below it
    assert cache.end_offset_for(0, 25) == (0, 0)          # below every epoch: first start
    assert cache.end_offset_for(6, 25) == UNDEFINED       # above every epoch
    assert cache.end_offset_for(UNDEFINED_EPOCH, 25) == UNDEFINED
    assert EpochCache().end_offset_for(1, 0) == UNDEFINED
    assert cache.epoch_end_offset(6, 25) is None


def test_assign_keeps_epochs_and_offsets_increasing():
    cache = EpochCache()
    assert cache.assign(1, 0)
    assert not cache.assign(1, 5)               # same epoch, later offset: nothing new
    assert cache.assign(2, 5)
    assert cache.assign(3, 5)                   # same start: the empty epoch 2 goes
    assert cache.entries == [(1, 0), (3, 5)]
    assert cache.assign(2, 7)                   # a lower epoch drops the later ones
    assert cache.entries == [(1, 0), (2, 7)]
    with pytest.raises(ValueError):
        cache.assign(-1, 3)


def test_truncation_from_end_and_start():
    cache = EpochCache([(1, 0), (2, 10), (4, 20)])
    assert cache.truncate_from_end(20)
    assert cache.entries == [(1, 0), (2, 10)]
    assert not cache.truncate_from_end(15)
    assert cache.truncate_from_start(12)
    assert cache.entries == [(2, 12)]
    assert not cache.truncate_from_start(12)
    assert not cache.truncate_from_start(5)


def test_checkpoint_text_round_trips_and_rejects_garbage():
    cache = EpochCache([(0, 0), (3, 17), (9, 1234)])
    text = cache.to_text()
    assert text == "0\n3\n0 0\n3 17\n9 1234\n"      # Kafka's leader-epoch-checkpoint layout
    assert EpochCache.from_text(text) == cache
    assert EpochCache.from_text("0\n0\n") == EpochCache()
    for bad in ("", "1\n0\n", "0\n2\n1 0\n", "0\n2\n3 10\n2 20\n", "0\n1\nx y\n"):
        with pytest.raises(ValueError):
            EpochCache.from_text(bad)
