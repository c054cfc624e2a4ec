"""E2SM-KPM ASN.1 definitions (``e2sm-kpm-v*.asn``) and the pycrate modules generated from them.

``_kpm_v2.py`` and ``_kpm_v3.py`` are generated at build time by ``python -m
xapp.adapters.e2.asn1.build`` and committed with their sources (the runtime image has a read-only
root file system, so nothing is generated next to the package at run time); the test suite
regenerates them and fails if the committed files differ.  E2AP itself comes from pycrate's own
bundled module (``pycrate_asn1dir.E2AP``).
"""
