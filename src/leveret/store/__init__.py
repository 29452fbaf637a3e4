"""Implementations of the broker's storage Protocols: in memory, and on disk."""

from __future__ import annotations
