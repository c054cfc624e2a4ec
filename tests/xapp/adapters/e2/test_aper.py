"""What the E2AP and E2SM-KPM modules share: the generated modules, the byte bounds applied
before parsing, the dialects, APER values that leave bytes over."""

from __future__ import annotations

import pytest

from tests.xapp.adapters.e2.vectors import golden
from xapp.adapters.e2 import aper, e2ap, kpm_decode, kpm_encode
from xapp.adapters.e2.asn1 import build
from xapp.adapters.e2.records import E2DecodeError

# --- generated modules are what the committed sources compile to ---------------------------


def test_generated_modules_match_sources() -> None:
    assert build.stale() == [], "run: python -m xapp.adapters.e2.asn1.build"


def test_size_limits_refuse_before_parsing() -> None:
    with pytest.raises(E2DecodeError, match="more than the 65536 accepted"):
        e2ap.decode_ric_indication(golden("ind0.bin") + bytes(aper.MAX_INDICATION_BYTES))
    with pytest.raises(E2DecodeError, match="empty"):
        e2ap.decode_ric_indication(b"")
    with pytest.raises(E2DecodeError, match="expected bytes"):
        e2ap.decode_ric_indication("00")  # type: ignore[arg-type]
    with pytest.raises(E2DecodeError, match="header: 4097 bytes"):
        kpm_decode.decode_kpm_indication(bytes(4097), b"\x00", 3)


def test_dialects() -> None:
    assert (aper.default_dialect(2), aper.default_dialect(3), aper.default_dialect(4)) == (
        "v2", "v3", "v3")
    for dialect in aper.DIALECTS:
        header, body = aper.dialect_modules(dialect)
        assert header in (aper.compiled().v2, aper.compiled().v3, aper.compiled().onf)
        assert body is not None
    with pytest.raises(E2DecodeError, match="dialect 'v9' is not known"):
        aper.dialect_modules("v9")


def test_bytes_left_over_are_refused() -> None:
    """Bytes after the value mean another type (often another KPM version): refused."""
    obj = aper.compiled().v3.E2SM_KPM_EventTriggerDefinition
    data = kpm_encode.encode_event_trigger(1000, 3)
    with aper.LOCK:
        assert aper.decode(obj, data, "trigger") == {"eventDefinition-formats": (
            "eventDefinition-Format1", {"reportingPeriod": 1000})}
        with pytest.raises(E2DecodeError, match="trigger: 1 bytes left over"):
            aper.decode(obj, data + b"\x00", "trigger")
