"""Errors that end up in front of a user as one line."""


class LcrInputError(ValueError):
    """Bad input from a user: a file, a field, a flag.

    The message is one line that names the source and the problem, e.g.
    ``trace.jsonl:12: field 'hash_ids': expected a list of integers``.
    The CLI prints it and exits 2 without a traceback.
    """

    def __init__(self, message: str, *, source: str | None = None, line: int | None = None):
        where = source or ""
        if source is not None and line is not None:
            where = f"{source}:{line}"
        super().__init__(f"{where}: {message}" if where else message)
        self.source = source
        self.line = line
