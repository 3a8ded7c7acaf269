"""The wallaby write-ahead log (`wallaby`): `<name>` LOG files with
`<name>.idx` indexes (spec: shared/specs/wallaby-log.md, generation B).

Modules: card (name, options, detection), layout (headers, records,
encoders, time-bucket names), log (a log as a stream: chunks, cuts,
records), lines (a chunk's JSON Lines, rendered without records), writer
(appending records and index records), format."""

from fmtfs.lazyexports import loader

__all__ = [
    "IDX_MAGIC",
    "LOG_MAGIC",
    "Bucketer",
    "WallabyFormat",
    "WallabyLog",
    "WallabyWriter",
    "create_pair",
    "encode_header",
    "encode_index_record",
    "encode_record",
    "index_path",
    "log_header_size",
]
# loaded on first use: detection and --help import only the format's card
__getattr__ = loader(
    __name__,
    {
        "IDX_MAGIC": "fmtfs.formats.wallaby.layout",
        "LOG_MAGIC": "fmtfs.formats.wallaby.card",
        "Bucketer": "fmtfs.formats.wallaby.layout",
        "WallabyFormat": "fmtfs.formats.wallaby.format",
        "WallabyLog": "fmtfs.formats.wallaby.log",
        "WallabyWriter": "fmtfs.formats.wallaby.writer",
        "create_pair": "fmtfs.formats.wallaby.layout",
        "encode_header": "fmtfs.formats.wallaby.layout",
        "encode_index_record": "fmtfs.formats.wallaby.layout",
        "encode_record": "fmtfs.formats.wallaby.layout",
        "index_path": "fmtfs.formats.wallaby.layout",
        "log_header_size": "fmtfs.formats.wallaby.layout",
    },
)
