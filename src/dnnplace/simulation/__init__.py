"""Event simulation of a placed pipeline (GPipe and 1F1B schedules)."""

from dnnplace.simulation.pipeline import Simulation, simulate

__all__ = ["Simulation", "simulate"]
