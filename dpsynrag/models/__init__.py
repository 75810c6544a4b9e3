"""models: see DESIGN.md (Layout)."""
