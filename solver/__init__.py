"""nodeplan's solver: compiles a scheduling batch into CP-SAT over pod classes and node templates."""
