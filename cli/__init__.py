"""The nodeplan command line: one module per command group (typer); decisions live in solver/, output in reports/."""
