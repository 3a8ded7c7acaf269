"""Shared test setup: where the fixtures live (tests/fixtures, see its README)."""

from __future__ import annotations

from pathlib import Path

FIXTURES = Path(__file__).resolve().parent / "fixtures"
