"""Trace-driven simulation: replay, sweeps, reports, plots."""
from lcr.sim.runner import Replay, replay
from lcr.sim.sweep import PolicySpec, SimResult, run_one, run_sweep

__all__ = ["Replay", "replay", "PolicySpec", "SimResult", "run_one", "run_sweep"]
