from ragen2.sync.base import WEIGHT_SYNCS, ObjectStoreSync, WeightSync

__all__ = ["WEIGHT_SYNCS", "ObjectStoreSync", "WeightSync"]
