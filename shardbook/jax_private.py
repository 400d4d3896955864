"""Compatibility name for :mod:`shardbook.private` (removed once every notebook migrated)."""
from .private import *  # noqa: F401,F403
