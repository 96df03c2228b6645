"""What the layer costs, OH vs BN (Figure 1, Table 1).

* :mod:`~kmtrf_core.cost.analytic`: FLOPs and bytes by count (:func:`attention_cost`);
* :mod:`~kmtrf_core.cost.harness`: time measured on the device, with the peak memory beside it
  (:func:`measure_model`, :func:`measure_grid`, :func:`compare_schemes`), and one whole
  training step (:func:`training_step_ms`);
* :mod:`~kmtrf_core.cost.memory`: the peak memory of one training step, from the CUDA allocator or
  the resident set of a CPU worker process (:func:`cuda_peak_mb`, :func:`cpu_peak_mb`);
* :mod:`~kmtrf_core.cost.fit`: the two joined: count tables beside measurements, and a
  non-negative fit of measured time to counted FLOPs and bytes (:func:`fit_cost_model`).
"""

from .analytic import attention_cost
from .fit import CostModel, attention_table, count_table, fit_cost_model, nondecreasing, table1_layout, with_counts
from .harness import (
    METRICS,
    Measurement,
    compare_schemes,
    machine_description,
    measure_grid,
    measure_model,
    training_step_ms,
)
from .memory import MEMORY_CPU_FRESH, MEMORY_CPU_HWM, MEMORY_CUDA, cpu_peak_mb, cuda_peak_mb

__all__ = [
    "CostModel",
    "METRICS",
    "MEMORY_CPU_FRESH",
    "MEMORY_CPU_HWM",
    "MEMORY_CUDA",
    "Measurement",
    "attention_cost",
    "attention_table",
    "count_table",
    "fit_cost_model",
    "nondecreasing",
    "table1_layout",
    "with_counts",
    "compare_schemes",
    "cpu_peak_mb",
    "cuda_peak_mb",
    "machine_description",
    "measure_grid",
    "measure_model",
    "training_step_ms",
]
