"""A decoded indication as the decoder process answers it: JSON that reads back as it was, and
every malformed answer refused as such (issue 21)."""

from __future__ import annotations

import pytest

from tests.xapp.adapters.e2.decoder_inputs import (
    CELL,
    FUNCTION,
    NODE,
    REQUEST,
    indication,
    make_ingest,
)
from xapp.adapters.e2.decoded_wire import WireError, decode_decoded, encode_decoded
from xapp.adapters.e2.indication_decoder import Decoded
from xapp.adapters.e2.records import KpmIndication, KpmReport, UeId


def test_an_answer_crosses_the_wire_as_it_was() -> None:
    ingest, _ = make_ingest()
    d = ingest.decoder.decode(indication(), NODE)
    assert d.outcome == "decoded" and d.kpm is not None and d.check == "checked"
    assert decode_decoded(encode_decoded(d)) == d
    for refused in (Decoded("refused_e2ap", "not APER", meid=None),
                    Decoded("refused_kpm", "x", REQUEST, FUNCTION, NODE, NODE, None, "v3",
                            "skipped")):
        assert decode_decoded(encode_decoded(refused)) == refused
    # Cell-level reports, values that are not integers, a UE with only some ids.
    kpm = KpmIndication(3, 1, None, 1000, None, (
        KpmReport({"RRU.PrbTotDl": 12.5}, cell=CELL),
        KpmReport({"L1M.SS-RSRP": -101.25}, ue=UeId(gnb_cu_ue_f1ap_id=4))), "flexric-v2")
    d = Decoded("decoded", "", REQUEST, FUNCTION, NODE, NODE, kpm, None, "")
    assert decode_decoded(encode_decoded(d)) == d


@pytest.mark.parametrize("doc", [
    b"", b"[", b"{}", b'"decoded"',
    b'["decoded","",[123,7],2,"n","n",null,"",null]',  # decoded without the indication
    b'["pwned","",null,null,null,"",null,"",null]',  # an outcome nobody counts
    b'["refused_kpm","",null,null,null,"","v9","",null]',  # a dialect that does not exist
    b'["refused_kpm","",null,null,null,"",null,"maybe",null]',
    b'["decoded","",[123,"7"],2,"n","n",null,"",[3,3,null,null,null,"v3",[]]]',
    b'["decoded","",[123,7],2,"n","n",null,"",[3,3,null,null,null,"v3",'
    b'[[{"a":NaN},null,null]]]]',
    b'["decoded","",[123,7],2,"n","n",null,"",[3,3,null,null,null,"v3",'
    b'[[{"a":Infinity},null,null]]]]',
    b'["decoded","",[123,7],2,"n","n",null,"",[3,3,null,null,null,"v3",'
    b'[[{"a":"1"},null,null]]]]',
    b'["decoded","",[123,7],2,"n","n",null,"",[3,3,null,null,null,"v3",'
    b'[[{"a":1},[1,2,3,4,5],null]]]]',  # a GUAMI that is a number
    b'["decoded","",[123,7],2,"n","n",null,"",[3,3,null,null,null,"v3",'
    b'[[{"a":1},[1,null,true,null,null],null]]]]',
    b'["decoded","",[123,7],2,"n","n",null,"",[3,3,null,null,null,"v3",[[{"a":1},null]]]]',
    b"[" * 100_000,
])
def test_a_malformed_answer_is_refused_as_such(doc: bytes) -> None:
    with pytest.raises(WireError):
        decode_decoded(doc)
