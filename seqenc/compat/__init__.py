"""Compatible retrains: the map to a parent's space and the lineage stored with a bundle."""
