"""``python -m sandrail``: the command line."""

from sandrail.cli import main

main()
