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

    def size_known(self) -> bool:
        """Whether size() is a look-up now (no rendering, no disk): the FUSE
        loop then answers a stat itself instead of handing it to a thread."""
        return False

    def read_in_memory(self, offset: int, size: int) -> bytes | None:
        """read() if its bytes are in memory already (no decode, no wait for
        a disk: the FUSE loop answers with it itself), else None."""
        return None

    def records(self):  # -> Iterable[list[Record]]
        """The record batches of a `.jsonl` view (for its Parquet twin)."""
        raise NotImplementedError

    def identity(self) -> str:
        """Changes whenever the file's bytes may have changed."""
        raise NotImplementedError
