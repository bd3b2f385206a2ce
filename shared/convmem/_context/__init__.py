"""Building a context: the request, the plan, the window, the assembled messages and their report."""
