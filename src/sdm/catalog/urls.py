"""Catalog URLs as they may be shown: the names of :mod:`sdm.urls`, where the masking is defined.

The rules hold for every URL SDM shows, not only the catalog's, so they live below every
layer; the catalog and its users keep importing them from here.
"""

from __future__ import annotations

from ..urls import MASK, PIECE, SECRET_KEYS, mask_urls, misparse, redact_url, scrub, secrets_of

__all__ = ["redact_url", "scrub", "mask_urls", "secrets_of", "misparse", "MASK", "PIECE", "SECRET_KEYS"]
