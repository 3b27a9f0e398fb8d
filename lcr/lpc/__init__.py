"""LPC: learned prefix caching from conversation text (Yang et al., NeurIPS 2025).

``chats``      ShareGPT conversations (split records rejoined by base id)
``workload``   the paper's closed-loop chat replay as a timed prefix-block trace
``features``   the predictor's input: last 5 user prompts, head+tail within a token budget
``encoder``    frozen sentence embeddings, cached on disk (pluggable model)
``model``      continuation classifiers (MLP, LightGBM, turns-only) and their metrics
``policy``     the LPC eviction order, LARU's next-access view of it, the Oracle

Heavy dependencies (torch, sentence-transformers, lightgbm) are imported lazily;
install them with ``pip install lcr[lpc]``. Importing any part of ``lcr.lpc`` registers
the ``sharegpt:`` trace generator (``lcr.traces`` does not know LPC).
"""
from lcr.lpc import workload as _workload  # noqa: F401  (registers the sharegpt generator)
