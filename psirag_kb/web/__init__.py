"""The team's web page: search, sources, answers, the topic tree and status in a browser."""
