"""User-facing input errors.

Why: every bad config, plan or trace must end the CLI with exit status 2 and a single
line that names the file, the field path and what is allowed. All loaders raise
`InputError`; the CLI turns it into that one line. Nothing else should be caught.
"""
from __future__ import annotations


class InputError(Exception):
    """A problem with user input, rendered as one line: `FILE: FIELD: message`."""

    def __init__(self, message: str, *, field: str = "", file: str = "") -> None:
        self.message = message
        self.field = field
        self.file = file
        super().__init__(self.one_line())

    def one_line(self) -> str:
        # guarantee a single line, whatever a hostile file name, key or value contains
        parts = [" ".join(p.split()) for p in (self.file, self.field, self.message)]
        return ": ".join(p for p in parts[:2] if p) + (": " if any(parts[:2]) else "") + parts[2]

    def within(self, *, file: str = "", prefix: str = "") -> "InputError":
        """Re-home the error: add a file name and/or a parent field path."""
        field = ".".join(p for p in (prefix, self.field) if p)
        return InputError(self.message, field=field, file=self.file or file)
