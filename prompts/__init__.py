"""The grader's prompts and tool descriptions, shipped inside gagar as `grader._prompts` (see pyproject.toml)."""
