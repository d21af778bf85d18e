"""The transaction coordinator: a deterministic core on __transaction_state."""
