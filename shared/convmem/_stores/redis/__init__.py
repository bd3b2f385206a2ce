"""The Redis stores (one node or a Cluster): operations as requests, Lua scripts."""
