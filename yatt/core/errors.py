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
        # guarantee a single, bounded line of plain text, whatever a hostile file name, key
        # or value contains: whitespace runs folded, control bytes (ESC, ...) shown escaped
        parts = [clean(p, limit) for p, limit in ((self.file, 300), (self.field, 300),
                                                  (self.message, 1000))]
        return ": ".join(p for p in parts[:2] if p) + (": " if any(parts[:2]) else "") + parts[2]

    def within(self, *, file: str = "", prefix: str = "") -> "InputError":
        """Re-home the error: add a file name and/or a parent field path."""
        field = ".".join(p for p in (prefix, self.field) if p)
        return InputError(self.message, field=field, file=self.file or file)


def clean(text: str, limit: int = 200) -> str:
    """`text` as one line of plain, printable text of at most ~`limit` characters:
    whitespace runs become one space, other control and format characters (ESC, bidi
    overrides, ...) become `\\xNN` escapes, and a long text keeps its head and tail."""
    text = " ".join(str(text).split())
    if any(not c.isprintable() for c in text):
        text = "".join(c if c.isprintable() else
                       (f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}") for c in text)
    if len(text) > limit:
        keep = max(8, limit // 2 - 2)
        text = f"{text[:keep]}...{text[-keep:]} ({len(text):,} characters)"
    return text
