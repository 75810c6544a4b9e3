"""prompts: see DESIGN.md (Layout)."""
