"""What nodeplan shows people: plan tables, the HTML report, plan diffs (terminal, Markdown) and their git sides."""
