"""MoE expert offloading: ``ExpertCache`` keeps k experts on the compute device under a
layered-paging policy. Needs torch (``pip install lcr[moe]``), imported only when a
cache is built, so ``import lcr`` works without it."""
from lcr.moe.expert_cache import ExpertCache, ExpertCacheStats, ExpertHandle, StaleExpertError

__all__ = ["ExpertCache", "ExpertCacheStats", "ExpertHandle", "StaleExpertError"]
