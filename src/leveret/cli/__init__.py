"""The ``leveret`` command."""

from __future__ import annotations
