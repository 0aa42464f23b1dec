"""The always-on service: daemon, watcher, jobs, HTTP API and its client."""
