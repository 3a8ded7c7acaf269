"""What a format declares about the records of a view: the kind of each
field, so the layers above type the records without guessing from text.

A record view's lines are JSON (LAYOUT.md §2), and JSON cannot say that a
string is a time or that `data` and `data_base64` are one column of bytes.
The format knows; it says so with a ViewSchema (Format.view_schema), and
fmtfs.parquet builds the Parquet twins' columns and the Spark data
source's typed Arrow batches from it:

  TIME    RFC 3339 text of one native precision (`unit`: s, ms, us, ns)
          -> a UTC timestamp of that unit.
  BYTES   opaque bytes spelled `K` (valid UTF-8) or `K_base64` (otherwise)
          -> ONE binary column `K` holding the raw bytes of every record.
  TEXT    text that is base64'd only when it is not UTF-8 (a path, a key)
          -> `K` a string column, `K_base64` a binary one (null where `K`
          was UTF-8).
  INT, FLOAT, BOOL, STRING
          -> int64, float64, bool, string, even when every value is null.
  NESTED  an object: a struct whose keys are learnt from the records; the
          `children` it declares are typed as declared.
  ARROW   a value of a given Arrow type (`arrow`), for types the format
          knows in full (a proio message from its descriptor).

A declaration types the keys the records carry: a declared key no record
has is no column, so one declaration may cover the variants of a view
(kestrel PUT and legacy lines).  Keys it does not list are inferred from
their JSON kinds (objects, arrays, numbers, strings; `K_base64` strings as
binary); nothing is guessed from what a string looks like.  A format that
declares nothing (view_schema returns None) gets that inference for every
key.

This module names no Arrow type, so a format that declares no ARROW field
needs no pyarrow."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

TIME_UNITS = ("s", "ms", "us", "ns")


class Kind(StrEnum):
    TIME = "time"
    BYTES = "bytes"
    TEXT = "text"
    INT = "int"
    FLOAT = "float"
    BOOL = "bool"
    STRING = "string"
    NESTED = "nested"
    ARROW = "arrow"


@dataclass(frozen=True)
class Field:
    """One key of a record (or of a nested object) and its kind."""

    name: str
    kind: Kind
    unit: str = ""  # TIME: the native precision
    children: tuple[Field, ...] = ()  # NESTED: the keys it declares
    arrow: Any = None  # ARROW: the pyarrow DataType of its values

    def __post_init__(self) -> None:
        if (self.kind is Kind.TIME) != (self.unit in TIME_UNITS):
            raise ValueError(f"{self.name}: a TIME field needs a unit of {TIME_UNITS}, and only it")
        if (self.kind is Kind.ARROW) != (self.arrow is not None):
            raise ValueError(f"{self.name}: an ARROW field needs an Arrow type, and only it")
        if self.children and self.kind is not Kind.NESTED:
            raise ValueError(f"{self.name}: only a NESTED field has children")

    # Constructors for the kinds that take more than a name.
    @classmethod
    def time(cls, name: str, unit: str) -> Field:
        return cls(name, Kind.TIME, unit=unit)

    @classmethod
    def nested(cls, name: str, *children: Field) -> Field:
        return cls(name, Kind.NESTED, children=children)

    @classmethod
    def typed(cls, name: str, arrow: Any) -> Field:
        return cls(name, Kind.ARROW, arrow=arrow)


@dataclass(frozen=True)
class ViewSchema:
    """The declared fields of one record view's lines, in line order."""

    fields: tuple[Field, ...]

    def __init__(self, *fields: Field) -> None:
        names = [f.name for f in fields]
        if len(set(names)) != len(names):
            raise ValueError(f"a field is declared twice in {names}")
        object.__setattr__(self, "fields", tuple(fields))

    def __iter__(self) -> Iterator[Field]:
        return iter(self.fields)

    def field(self, name: str) -> Field | None:
        return next((f for f in self.fields if f.name == name), None)

    def times(self) -> list[Field]:
        """The top-level TIME fields."""
        return [f for f in self.fields if f.kind is Kind.TIME]
