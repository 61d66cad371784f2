"""Models behind one small interface each, loaded on first use."""
