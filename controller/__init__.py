"""The in-cluster operator (``nodeplan run``): watch, batch, solve, launch, drain. The CLI is ``cli/``, reports are
``reports/``; no placement is decided here."""
