"""What the layer costs, OH vs BN (Figure 1, Table 1).

* :mod:`~kmtrf_core.cost.analytic`: FLOPs and bytes by count (:func:`attention_cost`);
* :mod:`~kmtrf_core.cost.harness`: time and peak memory measured on the device
  (:func:`measure_model`, :func:`measure_grid`, :func:`compare_schemes`).
"""

from .analytic import attention_cost
from .harness import METRICS, Measurement, compare_schemes, machine_description, measure_grid, measure_model

__all__ = [
    "METRICS",
    "Measurement",
    "attention_cost",
    "compare_schemes",
    "machine_description",
    "measure_grid",
    "measure_model",
]
