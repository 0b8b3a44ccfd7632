"""`dawnscope help [TOPIC]`: the documentation an installed user has (docs/*.md ship inside the package), by the
name the messages give (`docs/findings.md`, `findings`)."""
