"""Continuation classifiers: P(the conversation goes on after this turn).

``mlp``        the paper's head: [embedding, turns] -> 3 linear layers (128 hidden) ->
               sigmoid; BCE with the minority class up-weighted, Adam 5e-4, at most 20
               epochs, the epoch with the lowest validation loss kept
``lightgbm``   gradient-boosted trees on the same features, same class weights
``turns``      the paper's ablation: the majority training label per turn count

A model file (``lcr lpc-train``) is a ``torch.save`` dict that loads with
``weights_only=True``: tensors, numbers and strings only.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

from lcr.errors import LcrInputError

KINDS = ("mlp", "lightgbm", "turns")
# paper: [embedding, turns]; paper+length adds log prompt and context tokens; length drops the text
FEATURE_SETS = ("paper", "paper+length", "length")
TURN_SCALE = 10.0   # the MLP sees turns / 10, the same order as embedding entries
MAX_TURN_BIN = 10   # turns-only: counts past 10 share a bin


# Metrics -----------------------------------------------------------------------------
def mcc(y_true, y_pred) -> float:
    t, p = np.asarray(y_true, bool), np.asarray(y_pred, bool)
    tp, tn = float(np.sum(t & p)), float(np.sum(~t & ~p))
    fp, fn = float(np.sum(~t & p)), float(np.sum(t & ~p))
    denom = math.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
    return (tp * tn - fp * fn) / denom if denom else 0.0


def f1_macro(y_true, y_pred) -> float:
    t, p = np.asarray(y_true, bool), np.asarray(y_pred, bool)
    scores = []
    for cls in (True, False):
        tp = np.sum((t == cls) & (p == cls))
        fp = np.sum((t != cls) & (p == cls))
        fn = np.sum((t == cls) & (p != cls))
        scores.append(2 * tp / (2 * tp + fp + fn) if tp + fp + fn else 0.0)
    return float(np.mean(scores))


def class_weights(labels, reference=None) -> np.ndarray:
    """Per-sample weights of ``labels``: the minority class of ``reference`` (default:
    the labels themselves) weighs (majority count / minority count), the other 1."""
    labels = np.asarray(labels, bool)
    ref = labels if reference is None else np.asarray(reference, bool)
    pos, neg = int(ref.sum()), int((~ref).sum())
    w = np.ones(len(labels), np.float32)
    if pos and neg:
        if pos < neg:
            w[labels] = neg / pos
        else:
            w[~labels] = pos / neg
    return w


# Models ------------------------------------------------------------------------------
@dataclass
class Classifier:
    kind: str
    encoder: str = ""
    encoder_prefix: str = ""
    budget: int = 0
    feature_set: str = "paper"
    state: dict = field(default_factory=dict)
    history: list = field(default_factory=list)  # per-epoch (train loss, val loss)
    _net: object = None
    _booster: object = None

    def features(self, embeddings: np.ndarray, turns, lengths=None) -> np.ndarray:
        cols = [(np.asarray(turns, np.float32) / TURN_SCALE)[:, None]]
        if self.uses_text:
            cols.insert(0, embeddings)
        if self.feature_set != "paper":
            cols.append(np.log1p(np.asarray(lengths, np.float32)) / TURN_SCALE)
        return np.hstack(cols).astype(np.float32)

    @property
    def uses_text(self) -> bool:
        return self.kind != "turns" and self.feature_set != "length"

    def predict(self, embeddings: np.ndarray | None, turns, lengths=None) -> np.ndarray:
        turns = np.asarray(turns)
        if self.kind == "turns":
            table = self.state["turn_table"]
            return np.asarray([float(table[min(int(t), MAX_TURN_BIN)]) for t in turns])
        x = self.features(embeddings, turns, lengths)
        if self.kind == "lightgbm":
            return self.booster.predict(x, num_threads=1)  # one row at a time in serving: no thread pool
        import torch

        with torch.no_grad():
            return torch.sigmoid(self.net(torch.from_numpy(x))).squeeze(1).numpy()

    @property
    def net(self):
        if self._net is None:
            self._net = _mlp(int(self.state["input_dim"]))
            self._net.load_state_dict({k[4:]: v for k, v in self.state.items() if k.startswith("mlp.")})
            self._net.eval()
        return self._net

    @property
    def booster(self):
        if self._booster is None:
            import lightgbm

            self._booster = lightgbm.Booster(model_str=self.state["lightgbm_model"])
        return self._booster

    def save(self, path) -> None:
        """Write the model file, whole or not at all (``lcr.atomic``); one-line error if it
        cannot be written."""
        import io

        import torch

        from lcr.atomic import write_output

        doc = io.BytesIO()  # serialized first: torch's writer turns a failed write into a RuntimeError
        torch.save({"format": "lcr-lpc-1", "kind": self.kind, "encoder": self.encoder,
                    "encoder_prefix": self.encoder_prefix, "budget": self.budget,
                    "feature_set": self.feature_set, "state": self.state}, doc)
        write_output(path, doc.getbuffer(), "the model")

    @classmethod
    def load(cls, path) -> "Classifier":
        import torch

        try:
            doc = torch.load(path, weights_only=True)
        except FileNotFoundError:
            raise LcrInputError("model file not found", source=str(path)) from None
        except Exception as err:  # noqa: BLE001 - any unreadable file is bad input
            raise LcrInputError(f"not an lcr LPC model file ({type(err).__name__})", source=str(path)) from None
        if not isinstance(doc, dict) or doc.get("format") != "lcr-lpc-1" or doc.get("kind") not in KINDS:
            raise LcrInputError("field 'format': not an lcr LPC model file", source=str(path))
        return cls(doc["kind"], doc["encoder"], doc["encoder_prefix"], int(doc["budget"]),
                   doc.get("feature_set", "paper"), doc["state"])


def _mlp(input_dim: int, hidden: int = 128):
    from torch import nn

    return nn.Sequential(nn.Linear(input_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                         nn.Linear(hidden, 1))


def train_turns(turns, labels) -> Classifier:
    turns, labels = np.asarray(turns), np.asarray(labels, bool)
    overall = float(labels.mean()) if len(labels) else 0.5
    table = []
    for b in range(MAX_TURN_BIN + 1):
        sel = np.minimum(turns, MAX_TURN_BIN) == b
        # The majority label of the bin, as a 0/1 "probability" (empty bin: overall majority).
        share = labels[sel].mean() if sel.any() else overall
        table.append(1.0 if share >= 0.5 else 0.0)
    return Classifier("turns", state={"turn_table": table})


def train_mlp(x_train, y_train, x_val, y_val, *, epochs: int = 20, lr: float = 5e-4,
              batch_size: int = 64, seed: int = 0) -> tuple[dict, list]:
    import torch

    torch.manual_seed(seed)
    net = _mlp(x_train.shape[1])
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    xt, yt = torch.from_numpy(x_train), torch.from_numpy(np.asarray(y_train, np.float32))
    wt = torch.from_numpy(class_weights(y_train))
    xv, yv = torch.from_numpy(x_val), torch.from_numpy(np.asarray(y_val, np.float32))
    wv = torch.from_numpy(class_weights(y_val, reference=y_train))
    loss_fn = torch.nn.functional.binary_cross_entropy_with_logits
    best, best_state, history = math.inf, None, []
    gen = torch.Generator().manual_seed(seed)
    for _ in range(epochs):
        net.train()
        order = torch.randperm(len(xt), generator=gen)
        total = 0.0
        for s in range(0, len(order), batch_size):
            idx = order[s:s + batch_size]
            opt.zero_grad()
            loss = loss_fn(net(xt[idx]).squeeze(1), yt[idx], weight=wt[idx])
            loss.backward()
            opt.step()
            total += float(loss.detach()) * len(idx)
        net.eval()
        with torch.no_grad():
            val = float(loss_fn(net(xv).squeeze(1), yv, weight=wv)) if len(xv) else total / len(xt)
        history.append((total / len(xt), val))
        if val < best:
            best, best_state = val, {f"mlp.{k}": v.clone() for k, v in net.state_dict().items()}
    return best_state, history


def train_lightgbm(x_train, y_train, x_val, y_val, *, seed: int = 0) -> dict:
    import lightgbm

    params = {"objective": "binary", "learning_rate": 0.05, "num_leaves": 15, "min_data_in_leaf": 10,
              "feature_fraction": 0.5, "verbosity": -1, "seed": seed, "num_threads": 1}
    train = lightgbm.Dataset(x_train, np.asarray(y_train, float), weight=class_weights(y_train))
    sets = [train]
    if len(y_val):
        sets.append(lightgbm.Dataset(x_val, np.asarray(y_val, float),
                                     weight=class_weights(y_val, reference=y_train), reference=train))
    booster = lightgbm.train(params, train, num_boost_round=300, valid_sets=sets[1:],
                             callbacks=[lightgbm.early_stopping(20, verbose=False)] if len(sets) > 1 else [])
    return {"lightgbm_model": booster.model_to_string(num_iteration=booster.best_iteration or None)}


# Evaluation --------------------------------------------------------------------------
@dataclass
class Scores:
    model: str
    examples: int
    mcc: float
    f1_macro: float
    positive_rate: float

    def row(self) -> str:
        return f"{self.model:10s} n={self.examples:5d}  MCC {self.mcc:+.3f}  F1-macro {self.f1_macro:.3f}"


def score(name: str, probabilities, labels, threshold: float = 0.5) -> Scores:
    pred = np.asarray(probabilities) >= threshold
    return Scores(name, len(labels), mcc(labels, pred), f1_macro(labels, pred), float(pred.mean()))


def timed(fn, *args, repeats: int = 1):
    start = time.perf_counter()
    for _ in range(repeats):
        out = fn(*args)
    return out, (time.perf_counter() - start) / repeats
