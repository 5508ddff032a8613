"""esched."""
