"""Transitional: ``lcr sim-kv --policies laru-spec`` runs the executable reference of the
radix LARU's default rules (``lcr.kv.laru_reference``) until the radix registry drops the
name."""
from lcr.kv.laru_reference import ReferenceRadixLARU as RadixLARUSpec

LARUSpec = RadixLARUSpec  # temporary alias: other modules still import LARUSpec
