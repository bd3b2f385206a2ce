"""Where conversations live: the `Store` protocol, its codec and retention, and one folder per backend."""
