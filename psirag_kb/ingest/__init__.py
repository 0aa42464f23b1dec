"""Reading, chunking and embedding files, and ingesting them."""
