"""Elastic Beats disk queue (`beats`): a folder of `<id>.seg` segments and an
optional `state.dat` (spec: shared/specs/beats-diskqueue.md).

Modules: layout (headers, names, state.dat), frames (frame checks and
encoding), payload (payload <-> line mapping, see its docstring), cbor
(go-structform CBOR encoder), protobuf (shipper events), keys (AES-CTR and
key material), lz4stream (the LZ4 container), segment (reading one segment
in resumable runs), stream, writer, format."""

from fmtfs.lazyexports import loader

__all__ = ["BeatsFormat", "derive_key", "read_key_file"]
# loaded on first use: detection and --help import only the format's card
__getattr__ = loader(
    __name__,
    {
        "BeatsFormat": "fmtfs.formats.beats.format",
        "derive_key": "fmtfs.formats.beats.keys",
        "read_key_file": "fmtfs.formats.beats.keys",
    },
)
