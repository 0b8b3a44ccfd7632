"""Rendering: result rows and analysis documents in, terminal tables, plots, HTML pages and comparisons out. Never
reads a trace."""
