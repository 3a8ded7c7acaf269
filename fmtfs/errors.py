"""The one kind of error a user sees: a line on stderr, exit status 1, no
traceback (LAYOUT.md §1).

Every layer raises these for a user's mistake (a bad source, a bad key, a
busy mount point, an option FUSE refuses); anything else is a bug and keeps
its traceback.  The subclasses say where the mistake was found; the command
line catches them all as UserError."""

from __future__ import annotations


class UserError(Exception):
    """A user-facing problem: printed as one line, exit status 1."""


class FormatError(UserError):
    """A problem with a source or a format's option (a missing key, files
    that are not of the format asked for, an unknown format)."""


class BadRecord(ValueError):
    """A line written into a view that the format cannot encode (-> EINVAL
    for that write; not a UserError: the mount goes on serving)."""


class MountRefused(UserError):
    """FUSE would not mount (a bad -o option, no /dev/fuse)."""
