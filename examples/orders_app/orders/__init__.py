"""The orders application: each order in, its total out, offsets committed after."""
