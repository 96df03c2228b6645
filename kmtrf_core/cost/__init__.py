"""What the layer costs, OH vs BN (Figure 1, Table 1).

* :mod:`~kmtrf_core.cost.analytic`: FLOPs and bytes by count (:func:`attention_cost`);
* :mod:`~kmtrf_core.cost.harness`: time and peak memory measured on the device
  (:func:`measure_model`, :func:`measure_grid`, :func:`compare_schemes`);
* :mod:`~kmtrf_core.cost.fit`: the two joined: count tables beside measurements, and a
  non-negative fit of measured time to counted FLOPs and bytes (:func:`fit_cost_model`).
"""

from .analytic import attention_cost
from .fit import CostModel, attention_table, count_table, fit_cost_model, nondecreasing, table1_layout, with_counts
from .harness import METRICS, Measurement, compare_schemes, machine_description, measure_grid, measure_model

__all__ = [
    "CostModel",
    "METRICS",
    "Measurement",
    "attention_cost",
    "attention_table",
    "count_table",
    "fit_cost_model",
    "nondecreasing",
    "table1_layout",
    "with_counts",
    "compare_schemes",
    "machine_description",
    "measure_grid",
    "measure_model",
]
