"""The ``dnnplace`` command line: :mod:`dnnplace.cli.app` and one module per command group.

The console script runs ``from dnnplace.cli.app import main``: this package is imported first, and it
loads the application here, under a guard, so that Ctrl-C during the imports (typer, rich, numpy,
the commands) is one line and exit 130 rather than a traceback from the middle of an import.
"""

import sys

try:
    from dnnplace.cli import app as _app  # noqa: F401  (the application; imported here for the guard)
except KeyboardInterrupt:
    print("interrupted", file=sys.stderr)
    sys.exit(130)
