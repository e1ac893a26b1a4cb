"""The grader's prompts and tool descriptions, read from files at run time (`prompts/` in the repository).

A directory given by the user overrides any of the files; the rest come from the shipped defaults.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Prompts:
    system: str
    task: str
    no_tools: str
    tools: list[dict[str, Any]]


def _default_dir() -> Path:
    source_tree = Path(__file__).resolve().parents[3] / "prompts"
    if (source_tree / "system.md").is_file():
        return source_tree
    return Path(str(resources.files("grader._prompts")))


GEMMA3_TOOLS_TEMPLATE = "gemma3_tools.jinja"


def chat_template_path(name: str = GEMMA3_TOOLS_TEMPLATE) -> Path:
    """A chat template shipped with the prompts, for a server to render tool calls and results with.

    Args:
        name: the template's file name in prompts/.

    Returns:
        Its path (in the source tree or the installed package).

    Raises:
        FileNotFoundError: no such template is shipped.
    """
    path = _default_dir() / name
    if not path.is_file():
        raise FileNotFoundError(f"no chat template {name!r} in {path.parent}")
    return path


def load_prompts(directory: Path | str | None = None) -> Prompts:
    """Load prompts, files in `directory` taking precedence over the defaults.

    Raises FileNotFoundError for a directory that does not exist and ValueError for a tools.json that is not
    a list of tool specs with name, description and parameters.
    """
    override = Path(directory) if directory is not None else None
    if override is not None and not override.is_dir():
        raise FileNotFoundError(f"prompts directory {str(override)!r} does not exist")
    default = _default_dir()

    def read(name: str) -> str:
        if override is not None and (override / name).is_file():
            return (override / name).read_text(encoding="utf-8")
        return (default / name).read_text(encoding="utf-8")

    tools = json.loads(read("tools.json"))
    if not isinstance(tools, list) or not all(
        isinstance(t, dict) and {"name", "description", "parameters"} <= set(t) for t in tools
    ):
        raise ValueError("tools.json must be a list of {name, description, parameters} objects")
    return Prompts(system=read("system.md"), task=read("task.md"), no_tools=read("no_tools.md"), tools=tools)
