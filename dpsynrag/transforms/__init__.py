"""transforms: see DESIGN.md (Layout)."""
