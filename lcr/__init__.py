"""lcr: learning-augmented caching for GPU inference.

The pieces, by layer (see docs/architecture.md):
  lcr.policies  the pure-Python spec of every eviction policy
  lcr.traces    trace readers, generators and next-use computation
  lcr.predict   next-access predictors (oracle, noisy, constant; LightGBM later)
  lcr.sim       trace replay, sweeps, reports and plots
"""

__version__ = "0.1.0"
