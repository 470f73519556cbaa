"""thc package."""
