"""Launch strategies, one module each. ``select_launcher`` picks one from the framework params."""
