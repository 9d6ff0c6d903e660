//! The SVG timeline layout (being written): pure, no I/O.
