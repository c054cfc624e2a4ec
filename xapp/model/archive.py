"""What a skops artifact will allocate, checked before skops parses it.

A skops file is a zip archive: ``schema.json`` (the object tree) and one ``.npy`` member per
numpy array.  skops reads a member whole and hands it to ``np.load``, which allocates the array
its header declares *before* reading the data: a 2 MB file declaring a ``(2**29,)`` float64
array makes it allocate 4 GiB to find out the data is not there.  :func:`check_archive` reads
only the zip's central directory, each ``.npy`` member's header (a few hundred bytes) and
``schema.json``, and refuses the archive unless

- its members are ``schema.json`` and ``*.npy`` files only (what :func:`skops.io.dumps` writes
  for our estimators), with unique names, at most :attr:`Limits.max_members` of them;
- the declared uncompressed sizes add up to at most :attr:`Limits.max_uncompressed_bytes`
  (``zipfile`` never yields more than a member's declared size, so this also bounds what a
  deflate bomb can produce);
- every array's shape times its item size equals its member's data size exactly, so the array
  ``np.load`` allocates is no larger than bytes the archive really holds, and no dtype holds
  Python objects (those would need pickle, which is refused anyway);
- ``schema.json`` is at most :attr:`Limits.max_schema_bytes` and nested at most
  :attr:`Limits.max_schema_depth` deep (skops walks it recursively).

Every failure, including whatever ``zipfile``, ``json`` or numpy's header parser raise on a
malformed file, comes out as :class:`~xapp.model.errors.ArtifactError`.
"""

from __future__ import annotations

import io
import math
import zipfile
from dataclasses import dataclass

import numpy as np
from numpy.lib import format as npy_format

from xapp import bounded_json
from xapp.bounded_json import BoundedJsonError, JsonLimits
from xapp.model.errors import ArtifactError

SCHEMA_MEMBER = "schema.json"
#: numpy's own default cap on an .npy header (``max_header_size``); ours are about 120 bytes.
MAX_NPY_HEADER_BYTES = 10_000

_MiB = 1 << 20


@dataclass(frozen=True)
class Limits:
    """Caps on an artifact, checked before it is parsed.

    The shipped model (3 families, 15 trees of at most 31 leaves each, twice per family for the
    robust refit) is a 0.3 MiB file, 0.8 MiB uncompressed in 276 members, with a 0.45 MiB
    ``schema.json`` nested 20 deep.  The defaults leave room for about 20 times more trees
    (``--max-iter 300`` or larger leaves), and bound what loading may allocate: the arrays
    at most ``max_uncompressed_bytes``, the parsed schema (Python objects take up to ~20 times
    their JSON text) a few hundred MiB at worst, whatever sizes the file declares.

    Attributes
    ----------
    max_file_bytes : int, default=16 MiB
        Size of the ``.skops`` file on disk (read whole into memory to be verified).
    max_card_bytes : int, default=1 MiB
        Size of the model card (about 8 KiB).
    max_members : int, default=16384
        Members of the zip archive (one per array).
    max_uncompressed_bytes : int, default=32 MiB
        Sum of the members' declared uncompressed sizes.
    max_schema_bytes : int, default=8 MiB
        Uncompressed size of ``schema.json``.
    max_schema_depth : int, default=64
        Nesting depth of ``schema.json`` (kept well below Python's recursion limit).
    """

    max_file_bytes: int = 16 * _MiB
    max_card_bytes: int = 1 * _MiB
    max_members: int = 16_384
    max_uncompressed_bytes: int = 32 * _MiB
    max_schema_bytes: int = 8 * _MiB
    max_schema_depth: int = 64


DEFAULT_LIMITS = Limits()


def check_archive(data: bytes, limits: Limits = DEFAULT_LIMITS) -> None:
    """Refuse (with :class:`ArtifactError`) a skops archive that would allocate beyond
    ``limits`` or is not made of what our artifacts are made of; see the module docstring."""
    try:
        _check(data, limits)
    except ArtifactError:
        raise
    except Exception as exc:  # zipfile, zlib, json and numpy raise many types on bad input
        raise ArtifactError(f"malformed archive: {type(exc).__name__}: {exc}") from exc


def _check(data: bytes, limits: Limits) -> None:
    if len(data) > limits.max_file_bytes:
        raise ArtifactError(f"{len(data)} bytes, above the {limits.max_file_bytes}-byte cap")
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        infos = zf.infolist()
        if len(infos) > limits.max_members:
            raise ArtifactError(f"{len(infos)} archive members, above the cap of "
                                f"{limits.max_members}")
        names = [i.filename for i in infos]
        if len(set(names)) != len(names):
            raise ArtifactError("archive has duplicate member names")
        if SCHEMA_MEMBER not in names:
            raise ArtifactError(f"archive has no {SCHEMA_MEMBER}")
        total = sum(i.file_size for i in infos)
        if total > limits.max_uncompressed_bytes:
            raise ArtifactError(f"archive declares {total} uncompressed bytes, above the cap "
                                f"of {limits.max_uncompressed_bytes}")
        for info in infos:
            if info.filename == SCHEMA_MEMBER:
                _check_schema(zf, info, limits)
            elif _is_array_member(info.filename):
                _check_array(zf, info)
            else:
                raise ArtifactError(f"unexpected archive member {info.filename[:80]!r}")


def _is_array_member(name: str) -> bool:
    stem = name.removesuffix(".npy")
    return name.endswith(".npy") and bool(stem) and "/" not in stem and ".." not in stem


def _check_schema(zf: zipfile.ZipFile, info: zipfile.ZipInfo, limits: Limits) -> None:
    if info.file_size > limits.max_schema_bytes:
        raise ArtifactError(f"{SCHEMA_MEMBER} declares {info.file_size} bytes, above the cap "
                            f"of {limits.max_schema_bytes}")
    with zf.open(info) as fh:
        text = fh.read(limits.max_schema_bytes + 1)
    if len(text) > limits.max_schema_bytes:  # unreachable unless zipfile trusted a lie
        raise ArtifactError(f"{SCHEMA_MEMBER} is larger than it declares")
    try:
        bounded_json.loads(text, JsonLimits(max_bytes=limits.max_schema_bytes,
                                            max_depth=limits.max_schema_depth))
    except BoundedJsonError as exc:
        raise ArtifactError(f"{SCHEMA_MEMBER}: {exc}") from exc


def _check_array(zf: zipfile.ZipFile, info: zipfile.ZipInfo) -> None:
    name = info.filename[:80]
    with zf.open(info) as fh:
        version = npy_format.read_magic(fh)
        if version == (1, 0):
            shape, _fortran, dtype = npy_format.read_array_header_1_0(
                fh, max_header_size=MAX_NPY_HEADER_BYTES)
        elif version == (2, 0):
            shape, _fortran, dtype = npy_format.read_array_header_2_0(
                fh, max_header_size=MAX_NPY_HEADER_BYTES)
        else:
            raise ArtifactError(f"{name}: .npy format version {version} is not 1.0 or 2.0")
        header_end = fh.tell()
    if not isinstance(dtype, np.dtype) or dtype.hasobject:
        raise ArtifactError(f"{name}: dtype {dtype} holds Python objects")
    if not all(isinstance(n, int) and n >= 0 for n in shape):
        raise ArtifactError(f"{name}: bad shape {shape!r}")
    # Python integers: a declared (2**40, 2**40) cannot overflow into a small number.
    count = math.prod(shape)
    if dtype.itemsize == 0 and count > 0:  # zero-size items: any shape "fits" in no bytes
        raise ArtifactError(f"{name}: {count} items of zero-size dtype {dtype}")
    declared = count * dtype.itemsize
    held = info.file_size - header_end
    if declared != held:
        raise ArtifactError(f"{name}: header declares {declared} bytes of {dtype} "
                            f"{tuple(shape)}, the member holds {held}")
