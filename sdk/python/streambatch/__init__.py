"""streambatch's Python kit: user code for `exec` stages (see docs/exec.md)."""

__version__ = "0.1.0.dev0"
