"""Crafted artifacts: the bytes a broken trainer or a hostile key holder could write.

The loader's checks after the signature can only be reached by signed bytes, so the tests craft
archives here and sign them with the session's test key
(:func:`tests.xapp.model.conftest.write_signed`).
"""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Callable, Mapping
from typing import Any

import skops.io as sio
from numpy.lib import format as npy_format

from xapp.model.estimator import CapacityRegressor
from xapp.model.features import feature_names
from xapp.model.payload import ARTIFACT_FORMAT


def payload(models: Mapping[str, object], names: object = None,
            fmt: object = ARTIFACT_FORMAT) -> bytes:
    """A skops archive of a payload dict, with no check of what it holds (``names`` None:
    the right feature names of each family)."""
    feats = names if names is not None else {
        fam: list(feature_names(fam)) for fam in models
        if isinstance(models[fam], CapacityRegressor)}
    return bytes(sio.dumps({"format": fmt, "families": dict(models), "feature_names": feats}))


def members(data: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        return {i.filename: zf.read(i) for i in zf.infolist()}


def rezip(parts: Mapping[str, bytes], compression: int = zipfile.ZIP_DEFLATED) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=compression) as zf:
        for name, content in parts.items():
            zf.writestr(name, content)
    return buf.getvalue()


def array_names(data: bytes) -> list[str]:
    return sorted(n for n in members(data) if n.endswith(".npy"))


def npy_header(shape: tuple[int, ...], descr: object = "<f8") -> bytes:
    """An .npy v1.0 magic and header declaring ``shape`` of ``descr`` (no data)."""
    buf = io.BytesIO()
    npy_format.write_array_header_1_0(buf, {"descr": descr, "fortran_order": False,
                                            "shape": shape})
    return buf.getvalue()


def with_array(data: bytes, name: str, content: bytes) -> bytes:
    """The archive with member ``name`` replaced by ``content``."""
    parts = members(data)
    parts[name] = content
    return rezip(parts)


def with_schema(data: bytes, edit: Callable[[Any], Any]) -> bytes:
    """The archive with its schema.json replaced by ``edit(schema)``."""
    parts = members(data)
    parts["schema.json"] = json.dumps(edit(json.loads(parts["schema.json"]))).encode()
    return rezip(parts)


def declare_size(data: bytes, name: str, size: int) -> bytes:
    """The archive with the central directory's uncompressed size of ``name`` set to ``size``
    (below 4 GiB: no ZIP64 record needed), the bytes of the member untouched."""
    out = bytearray(data)
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        start = zf.start_dir
    pos = start
    sig = b"PK\x01\x02"
    while True:
        pos = out.index(sig, pos)
        name_len = int.from_bytes(out[pos + 28:pos + 30], "little")
        if out[pos + 46:pos + 46 + name_len].decode() == name:
            out[pos + 24:pos + 28] = size.to_bytes(4, "little")
            return bytes(out)
        pos += 4
