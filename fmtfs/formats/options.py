"""Options a format declares, and every spelling built from one declaration.

A format lists its options once (`Format.declared_options`); the core spells
each of them the way its front end expects, so adding an option or a format
touches no core module:

    Option("key_file", ...)  ->  fmtfs --key-file FILE        (cli)
                                 -o key_file=FILE, key-file=  (mount(8), fstab)
                                 .option("keyFile", ...)      (Spark; any case)
                                 "options": {"key_file": ...} (_fmtfs.json,
                                                               unless secret)

Values arrive as text from all three front ends and are parsed here, by the
option's own `parse`.  The parsed values (defaults filled in) are the
options dict a Format is opened with; a format may turn one into another in
its constructor (beats: a key file into the key itself), and whatever it
keeps that is not a declared public option counts as secret: never shown,
and only a digest of it keys the index.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Option:
    name: str  # snake_case: the -o and _fmtfs.json spelling; --flag and camelCase follow
    help: str  # one line for --help (the default is added to it)
    parse: Callable[[str], Any] = str  # text -> value; ValueError for a bad text
    default: Any = None
    metavar: str | None = None
    choices: tuple[str, ...] = ()
    secret: bool = False  # key material or the way to it: never shown or logged

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def mount_names(self) -> tuple[str, str]:
        """`-o` spellings: as declared, and with dashes as the flag has them."""
        return self.name, self.name.replace("_", "-")

    @property
    def spark_name(self) -> str:
        first, *rest = self.name.split("_")
        return first + "".join(word.capitalize() for word in rest)

    def parse_text(self, text: str) -> Any:
        """A value given as text; ValueError naming the option when it is bad."""
        if self.choices and text not in self.choices:
            raise ValueError(f"option {self.name}: {text!r} is not one of {', '.join(self.choices)}")
        try:
            return self.parse(text)
        except (ValueError, TypeError) as exc:
            raise ValueError(f"option {self.name}: invalid value {text!r} ({exc})") from None

    def help_text(self) -> str:
        if self.default is None or self.secret:
            return self.help
        return f"{self.help} (default: {self.default})"


def values(declared: Iterable[Option], given: Mapping[str, Any]) -> dict[str, Any]:
    """The options dict a format is opened with: every declared option's
    given value, else its default; anything else given (an option a format
    resolved earlier, such as beats' key) passes through."""
    out = {option.name: option.default for option in declared}
    out.update((name, value) for name, value in given.items() if value is not None)
    return out


def from_spark(declared: Iterable[Option], spark_options: Mapping[str, str]) -> dict[str, Any]:
    """Declared options found among a Spark reader's options (whose keys
    Spark lowercases; any case is accepted), parsed."""
    lowered = {str(key).lower(): str(value) for key, value in spark_options.items()}
    found: dict[str, Any] = {}
    for option in declared:
        text = lowered.get(option.spark_name.lower())
        if text is not None and text != "":
            found[option.name] = option.parse_text(text)
    return found


def public(declared: Iterable[Option], options: Mapping[str, Any]) -> dict[str, Any]:
    """What `_fmtfs.json` and `fmtfs info` show: declared, non-secret options."""
    return {
        option.name: _shown(options.get(option.name, option.default))
        for option in declared
        if not option.secret
    }


def _shown(value: Any) -> Any:
    return str(value) if isinstance(value, Path) else value


def unique(options: Iterable[Option]) -> list[Option]:
    """Options of several formats, each name once (formats share some, such
    as time_bucket), in order of first appearance."""
    seen: dict[str, Option] = {}
    for option in options:
        seen.setdefault(option.name, option)
    return list(seen.values())


# Options several formats share: declared once, so every front end spells
# them alike.
TIME_BUCKET = Option(
    "time_bucket",
    "the UTC period of each file in buckets/ folders",
    default="hour",
    choices=("minute", "hour", "day"),
)
