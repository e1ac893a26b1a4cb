"""Graders: turn a group's workspace into a validated ranking of its passing trajectories."""

from grader.graders.base import Grade, Grader, GradingFailed, get_grader

__all__ = ["Grade", "Grader", "GradingFailed", "get_grader"]
