"""Fixtures of the command-line tests: the recipe benchmark built from real repositories, as prepare's own
tests build it."""

from tests.evaluation.test_bench_prepare import sources  # noqa: F401 - a fixture, used by name
