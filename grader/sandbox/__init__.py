"""Running commands on a group's trees, isolated: see `base` for the interface, `open_sandbox` to get one."""

from grader.sandbox.base import (
    BACKENDS,
    BASE_TARGET,
    ExecResult,
    Limits,
    Sandbox,
    SandboxError,
    SandboxUnavailable,
    TreeSource,
    open_sandbox,
)

__all__ = [
    "BACKENDS",
    "BASE_TARGET",
    "ExecResult",
    "Limits",
    "Sandbox",
    "SandboxError",
    "SandboxUnavailable",
    "TreeSource",
    "open_sandbox",
]
