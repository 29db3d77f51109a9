"""The streamplane command line."""
