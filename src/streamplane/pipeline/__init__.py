"""The data pipeline on PySpark."""
