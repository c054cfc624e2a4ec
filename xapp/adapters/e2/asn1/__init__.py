"""E2SM-KPM ASN.1 definitions (``e2sm-kpm-*.asn``) and the pycrate modules generated from them.

One module per dialect the codec reads (``xapp.adapters.e2.aper.DIALECTS``): ``_kpm_v2.py``
(KPM v02.00), ``_kpm_v3.py`` (v03.00, also v04.00), ``_kpm_flexric.py`` (FlexRIC's modified
text: v3 with seven extension markers moved) and ``_kpm_onf_v2.py`` (v02.00.03 of the
ONF/Radisys lineage), all written in this project.  They are generated at build time by ``python -m
xapp.adapters.e2.asn1.build`` and committed with their sources (the runtime image has a read-only
root file system, so nothing is generated next to the package at run time); the test suite
regenerates them and fails if the committed files differ.  E2AP itself comes from pycrate's own
bundled module (``pycrate_asn1dir.E2AP``).
"""
