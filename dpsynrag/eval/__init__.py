"""eval: see docs/design.md, sections 7 and 9."""
