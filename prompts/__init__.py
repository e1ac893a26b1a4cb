"""The grader's prompts and tool descriptions, shipped in gagar as `grader._prompts` (see pyproject.toml)."""
