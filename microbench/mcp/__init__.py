"""`dawnscope mcp`: a Model Context Protocol server (the `mcp` SDK, stdio) whose tools are the library's own
analyses (answers.py), read-only, each answer the document the CLI's --json writes with its `cannot_answer` list
(server.py)."""
