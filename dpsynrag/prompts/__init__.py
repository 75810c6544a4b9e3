"""prompts: see docs/design.md, section 7 (package layout)."""
