"""eval: see DESIGN.md (Layout)."""
