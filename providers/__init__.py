"""Cloud providers: the instance catalog (types, offerings, prices) and instance lifecycle."""
