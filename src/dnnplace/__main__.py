"""``python -m dnnplace`` runs the CLI."""

import sys

try:
    from dnnplace.cli.app import main
except KeyboardInterrupt:  # Ctrl-C while the CLI is still loading: no traceback
    print("interrupted", file=sys.stderr)
    sys.exit(130)

main()
