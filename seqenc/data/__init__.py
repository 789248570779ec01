"""Events → sequences → batches."""
