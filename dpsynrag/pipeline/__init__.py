"""pipeline: see DESIGN.md (Layout)."""
