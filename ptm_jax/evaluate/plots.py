"""Pictures of what models learned: layer-wise probe curves, scalar-mix weights per task and 2-D maps of word
vectors (matplotlib, headless Agg backend). Attention heatmaps are in ``evaluate/attention_maps.py``."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np


def pyplot():
    """matplotlib.pyplot on the non-interactive Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: str | Path) -> Path:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    pyplot().close(fig)
    return out


def plot_layer_curves(curves: Mapping[str, Sequence[float]], path: str | Path, *, title: str = "",
                      ylabel: str = "probe accuracy", xlabel: str = "layer (0 = embeddings)") -> Path:
    """One line per name (e.g. 'MiniLM / POS') over the layers 0..L-1: probe accuracy per layer."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.0, 3.8))
    for name, ys in curves.items():
        ax.plot(range(len(ys)), ys, marker="o", label=name)
    width = max((len(ys) for ys in curves.values()), default=1)
    ax.set_xticks(range(width))
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    if title:
        ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    return _save(fig, path)


def plot_scalar_mix(weights: Mapping[str, Sequence[float]], path: str | Path, *, title: str = "",
                    softmax: bool = False) -> Path:
    """The scalar-mix weights learned per task (Peters et al. 2018 Sec. 3.2: s = softmax(w)), one line per task
    over the layers; ``softmax`` applies it to raw parameters first. The same axes as the probe curves, so the
    two pictures read together."""
    curves = {}
    for task, w in weights.items():
        w = np.asarray(w, np.float64)
        if softmax:
            w = np.exp(w - w.max())
            w = w / w.sum()
        curves[task] = w.tolist()
    return plot_layer_curves(curves, path, title=title, ylabel="scalar-mix weight s_j")


def project_2d(vectors: np.ndarray, method: str = "pca", seed: int = 0) -> np.ndarray:
    """[n, d] -> [n, 2]: PCA (numpy SVD of the centred vectors) or t-SNE (scikit-learn, seeded; perplexity
    below n)."""
    x = np.asarray(vectors, np.float64)
    if method == "pca":
        x = x - x.mean(axis=0)
        _, _, vt = np.linalg.svd(x, full_matrices=False)
        return x @ vt[:2].T
    if method == "tsne":
        try:
            from sklearn.manifold import TSNE
        except ImportError:
            from ptm_jax.errors import ConfigError

            raise ConfigError("--method tsne needs scikit-learn (pip install scikit-learn); --method pca needs "
                              "nothing") from None
        return TSNE(n_components=2, perplexity=min(30.0, max(2.0, (len(x) - 1) / 3)), random_state=seed,
                    init="pca").fit_transform(x)
    from ptm_jax.errors import ConfigError

    raise ConfigError(f"--method={method!r}: expected 'pca' or 'tsne'")


def plot_word_map(words: Sequence[str], points: np.ndarray, path: str | Path, *, labelled: Sequence[str] = (),
                  title: str = "") -> Path:
    """A scatter of 2-D points, the ``labelled`` words (all when empty) written beside their points."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7.0, 6.0))
    show = set(labelled) if labelled else set(words)
    grey = [i for i, w in enumerate(words) if w not in show]
    ax.scatter(points[grey, 0], points[grey, 1], s=6, c="#bbbbbb")
    for i, w in enumerate(words):
        if w in show:
            ax.scatter(points[i, 0], points[i, 1], s=14, c="#1f77b4")
            ax.annotate(w, (points[i, 0], points[i, 1]), fontsize=8, xytext=(3, 2), textcoords="offset points")
    if title:
        ax.set_title(title, fontsize=10)
    return _save(fig, path)
