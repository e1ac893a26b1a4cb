"""What every bench's command line shares."""

from __future__ import annotations

import argparse


def parser_for(doc: str | None) -> argparse.ArgumentParser:
    """A bench's argument parser, its help the bench's module docstring with the line breaks kept."""
    return argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
