"""The one exception type out of the model package's loading boundary."""

from __future__ import annotations


class ArtifactError(Exception):
    """An artifact that cannot be used: missing, unsigned, damaged, tampered with, too large or
    incompatible.  Every failure of :func:`xapp.model.artifact.load` is one, whatever the
    library underneath raised, so a caller (the hot-reload thread) needs one ``except``."""
