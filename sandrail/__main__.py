"""``python -m sandrail``: the command line, started as the console script
starts it (:mod:`_sandrail_start`; here only once the package has loaded)."""

from _sandrail_start import main

main()
