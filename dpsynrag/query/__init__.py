"""query: see DESIGN.md (Layout)."""
