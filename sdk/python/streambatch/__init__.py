"""streambatch's Python kit: user code for `exec` stages (see docs/exec.md), and batches of a
stream:// sink for a training loop (iter_batches; docs/training.md)."""

__version__ = "0.1.0.dev0"


def iter_batches(*args, **kwargs):
    """streambatch.ingest.iter_batches (imported on first use: exec stages never need ctypes)."""
    from streambatch.ingest import iter_batches as _iter_batches
    return _iter_batches(*args, **kwargs)
