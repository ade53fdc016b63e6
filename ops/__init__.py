"""Day-2 operations on a deployed stack: ``python -m ops --help`` (ops/__main__.py)."""
