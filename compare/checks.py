"""The one helper the argument checks of the public entry points share (compare.kvcache, compare.varlen)."""


def need(condition: bool, message, error=ValueError) -> None:
    """Raise error(message) unless condition. message may be a function giving it, formatted only on failure:
    the decode checks run on every call, where the host time matters."""
    if not condition:
        raise error(message() if callable(message) else message)
