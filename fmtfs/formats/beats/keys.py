"""Key material for encrypted segments (options bit 0x1): AES-128-CTR.

The key is never logged or put into an error message; only its absence or
its failure to decrypt a first frame is reported."""

from __future__ import annotations

import hashlib
import os
import string
from pathlib import Path

from fmtfs.formats.base import FormatError
from fmtfs.formats.beats.card import KEY_FILE, PASSWORD_VARIABLE  # noqa: F401 - imported from here too
from fmtfs.permissions import warn_if_shared

KEY_SIZE = 16
_HEX = frozenset(string.hexdigits)


def resolve_key(key_file: str | Path | None, key: bytes | None = None) -> bytes | None:
    """The AES key: `key` when already resolved (a decode worker, a test),
    else read from `key_file`, else derived from $FMTFS_BEATS_PASSWORD;
    None when there is none."""
    if key is not None:
        return key
    if key_file is not None:
        return read_key_file(key_file)
    password = os.environ.get(PASSWORD_VARIABLE)
    return derive_key(password) if password else None


def derive_key(password: str) -> bytes:
    """elastic-agent-shipper's derivation: PBKDF2-HMAC-SHA1, salt = the
    password itself, 4096 iterations, 16 bytes."""
    raw = password.encode("utf-8")
    return hashlib.pbkdf2_hmac("sha1", raw, raw, 4096, KEY_SIZE)


def read_key_file(path: str | Path) -> bytes:
    """A key file holds the raw 16 bytes, or 32 hex characters (surrounding
    whitespace allowed)."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise FormatError(f"{path}: cannot read key file ({exc.strerror})") from None
    warn_if_shared(Path(path))
    if len(data) == KEY_SIZE:
        return data
    text = data.strip()
    if len(text) == 2 * KEY_SIZE and all(chr(c) in _HEX for c in text):
        return bytes.fromhex(text.decode("ascii"))
    raise FormatError(f"{path}: a key file holds 16 raw bytes or 32 hex characters")


def ctr_xor(key: bytes, iv: bytes, position: int, data: bytes | memoryview) -> bytes:
    """AES-128-CTR over `data`, which starts at plaintext offset `position` of
    the segment's single keystream (counter = IV + position // 16 as a 128-bit
    big-endian integer, dropping position % 16 keystream bytes).  The same
    call encrypts and decrypts."""
    # imported here: cryptography costs ~7 MB in every process (mount,
    # decode workers, twin builder) and only encrypted queues need it
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    block, skip = divmod(position, 16)
    counter = ((int.from_bytes(iv, "big") + block) % (1 << 128)).to_bytes(16, "big")
    ctx = Cipher(algorithms.AES(key), modes.CTR(counter)).encryptor()
    if skip:
        ctx.update(bytes(skip))
    return ctx.update(data) + ctx.finalize()
