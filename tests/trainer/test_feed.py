"""The device feed: a batch held ahead is not yet the checkpoint's, and every batch arrives once, in order."""

from __future__ import annotations

import torch

from tests.trainer.test_model import batch
from trainer.feed import DeviceFeed


class Loader:
    """Three batches an epoch, counting what it delivered, as ResumableLoader does."""

    def __init__(self) -> None:
        self.delivered, self.epoch = 0, 0

    def __iter__(self):
        for i in range(3):
            self.delivered += 1
            b = batch()
            yield type(b)(**{**vars(b), "dense": torch.full_like(b.dense, float(i))})
        self.epoch, self.delivered = self.epoch + 1, 0

    def state_dict(self):
        return {"epoch": self.epoch, "delivered": self.delivered}


def test_a_feed_copying_ahead_saves_the_position_of_the_batches_it_handed_over():
    loader = Loader()
    feed = DeviceFeed(loader, torch.device("cpu"), ahead=True)
    seen, positions = [], []
    for b in feed:
        seen.append(int(b.dense[0, 0]))
        positions.append((feed.state_dict(), loader.delivered))
    assert seen == [0, 1, 2]
    # the loader ran one batch ahead (and ended its epoch under the last step); the feed's position did not
    assert positions == [({"epoch": 0, "delivered": 1}, 2), ({"epoch": 0, "delivered": 2}, 3),
                         ({"epoch": 0, "delivered": 3}, 0)]  # fmt: skip
    assert feed.state_dict() == {"epoch": 1, "delivered": 0}  # the epoch over: the loader's own


def test_a_feed_closed_mid_epoch_keeps_the_position_before_the_batch_it_held():
    loader = Loader()
    feed = DeviceFeed(loader, torch.device("cpu"), ahead=True)
    batches = iter(feed)
    next(batches)
    assert feed.state_dict() == {"epoch": 0, "delivered": 1} and loader.delivered == 2
    batches.close()
    assert feed.state_dict() == {"epoch": 0, "delivered": 1}  # a resume makes the held batch again
