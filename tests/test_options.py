"""Options declared by the formats and their spellings (fmtfs.formats.options):
flags, -o names with underscores or dashes, Spark's camelCase in any case,
_fmtfs.json without secrets, and the key as part of the index's identity."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from fmtfs.cli import build_parser, format_options
from fmtfs.formats import format_class, open_source, registry
from fmtfs.formats.options import TIME_BUCKET, Option, from_spark, public
from fmtfs.mountoptions import expand_options
from fmtfs.spark.source import open_format
from fmtfs.views import META_INFO, SourceTree
from tests.mounting import fmtfs
from tests.test_beats_build import KEY, event, segment

SIZE = Option("journal_size", "bytes", parse=int, default=7, metavar="BYTES")


def test_one_declaration_gives_every_spelling() -> None:
    assert (SIZE.flag, SIZE.mount_names, SIZE.spark_name) == (
        "--journal-size",
        ("journal_size", "journal-size"),
        "journalSize",
    )
    assert SIZE.parse_text("12") == 12
    with pytest.raises(ValueError, match="option journal_size: invalid value 'x'"):
        SIZE.parse_text("x")
    with pytest.raises(ValueError, match="not one of minute, hour, day"):
        TIME_BUCKET.parse_text("week")
    # Spark lowercases the keys it is given: any case of the camelCase name is found
    assert from_spark([SIZE, TIME_BUCKET], {"journalsize": "3", "TimeBucket": "day", "view": "x"}) == {
        "journal_size": 3,
        "time_bucket": "day",
    }
    secret = Option("key_file", "a key", parse=Path, secret=True)
    assert public([SIZE, secret], {"journal_size": 9, "key_file": Path("/k")}) == {"journal_size": 9}


def test_every_format_option_is_a_flag_and_an_o_option() -> None:
    declared = registry.all_options()
    assert {o.name for o in declared} >= {"key_file", "time_bucket", "descriptor_set", "kestrel_journal_size"}
    for option in declared:
        for spelling in option.mount_names:
            words = expand_options(["SRC", "MNT", "-o", f"ro,{spelling}=V,allow_other"])
            assert words == ["SRC", "MNT", option.flag, "V", "-o", "ro,allow_other"]
    args = build_parser().parse_args(["ls", "SRC", "--time-bucket", "day", "--kestrel-journal-size", "99"])
    assert format_options(args) == {"time_bucket": "day", "kestrel_journal_size": 99}


def test_a_format_gets_its_declared_options_with_their_defaults(tmp_path: Path) -> None:
    src = tmp_path / "q"
    src.mkdir()
    (src / "0.seg").write_bytes(segment("v2", [event(0)], 0))
    fmt = open_source(src, None, {})
    assert fmt.name == "beats" and fmt.options == {"time_bucket": "hour"}
    spark = open_format({"path": str(src), "timebucket": "minute"})
    assert spark.options["time_bucket"] == "minute"
    assert [o.name for o in format_class("gvfs").declared_options] == []


def test_the_key_is_secret_but_part_of_the_index_identity(tmp_path: Path) -> None:
    src = tmp_path / "q"
    src.mkdir()
    (src / "0.seg").write_bytes(segment("v2", [event(0)], 1, key=KEY))
    key_file = tmp_path / "key"
    key_file.write_text(KEY.hex())
    key_file.chmod(0o600)
    fmt = open_source(src, "beats", {"key_file": key_file})
    assert fmt.key == KEY and "key_file" not in fmt.options
    info = SourceTree(fmt, tmp_path / "cache").read(META_INFO, 0, 1 << 20)
    shown = orjson.loads(info)["options"]
    assert shown == {"time_bucket": "hour", "encrypted_key": True, "read_only": False}
    assert KEY.hex().encode() not in info and str(key_file).encode() not in info
    identity = fmt.options_identity()
    assert KEY.hex() not in str(identity) and repr(KEY) not in str(identity)
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "0.seg").write_bytes(segment("v2", [event(0)], 0))  # takes any key
    other = open_source(plain, "beats", {"key": bytes(16)}).options_identity()
    assert identity["key"] != other["key"] and identity["time_bucket"] == other["time_bucket"]
    assert open_source(plain, "beats", {"key": KEY}).options_identity() == identity


def test_an_option_another_format_declares_is_ignored_with_a_warning(tmp_path: Path) -> None:
    src = tmp_path / "q"
    src.mkdir()
    (src / "0.seg").write_bytes(segment("v2", [event(0)], 0))
    done = fmtfs("ls", src, "--descriptor-set", tmp_path / "none.desc", "--cache-dir", tmp_path / "c")
    assert b"segments/" in done.stdout
    assert b"--descriptor-set does not apply to beats sources: ignored" in done.stderr
    bad = fmtfs("ls", src, "--time-bucket", "week", check=False)
    assert bad.returncode == 2 and b"'week' is not one of minute, hour, day" in bad.stderr
