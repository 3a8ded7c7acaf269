"""The interface of one file of a view tree (fmtfs.views), apart so that
the files the tree holds (fmtfs.twins' Parquet twins too) need not import
the tree."""

from __future__ import annotations

from abc import ABC, abstractmethod


class ViewFile(ABC):
    """One file of the tree."""

    @abstractmethod
    def size(self) -> int: ...

    @abstractmethod
    def read(self, offset: int, size: int) -> bytes: ...

    def records(self):  # -> Iterable[list[Record]]
        """The record batches of a `.jsonl` view (for its Parquet twin)."""
        raise NotImplementedError

    def identity(self) -> str:
        """Changes whenever the file's bytes may have changed."""
        raise NotImplementedError
