"""One module per family of placement rules. Each answers, for its rule, whether a pod class may use a
node (``admits``), and explains a refusal in words a person can act on (``explain``); rules that couple
nodes (limits) also add constraints to the integer master."""
