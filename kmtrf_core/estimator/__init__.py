"""The scikit-learn door: :class:`TransformerKMeans`, k-means whose update step is a transformer layer.

A room of its own because a learned layer is trained on demand through the
run cache (:mod:`kmtrf_core.training`), which the paper's modules at the
package top never import.
"""

from .kmeans import LAYERS, TransformerKMeans, learned_config, load_layer

__all__ = ["LAYERS", "TransformerKMeans", "learned_config", "load_layer"]
