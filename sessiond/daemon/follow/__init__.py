"""Following foreign writers: see ``tree`` (the watches) and ``reading`` (whole lines)."""

from .tree import Follower

__all__ = ["Follower"]
