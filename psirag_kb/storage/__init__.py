"""DuckDB, the derived indexes, and the one thread that writes them."""
