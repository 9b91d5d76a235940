"""IBA Explorer core library."""
