"""``python -m dnnplace`` runs the CLI."""

from dnnplace.cli.app import main

main()
